"""The report end to end: real scored runs -> one self-contained HTML file that headless
Chromium opens from a file URL with no network; the screenshot shows the leaderboard, the
CDF and the map. Plus `agl report` logging to MLflow (SQLite)."""

from __future__ import annotations

import re
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from agl.predictions.records import write_predictions

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory, qwen_published, agl1k_manifest) -> Path:
    """Two evaluated runs: the authors' Qwen2.5-Omni and a copy moved 3 degrees east."""
    from agl.predictions.importer import import_published
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    root = tmp_path_factory.mktemp("runs")
    preds = import_published(qwen_published)
    shifted = [replace(p, longitude=((p.longitude + 183) % 360) - 180, original=None)
               if p.longitude is not None else replace(p, original=None) for p in preds]
    for name, ps in (("qwen", preds), ("qwen-east", shifted)):
        path = root / "src" / f"{name}.jsonl"
        write_predictions(path, ps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            evaluate_run(run=name, predictions_path=path, manifest_path=agl1k_manifest,
                         out_dir=root / "runs" / name,
                         config=EvaluateConfig(protocols=["paper"], metric_bootstrap=50, track=False))
        shutil.copy(path, root / "runs" / name / "predictions.jsonl")
    return root


CFG = {"group_bootstrap": 100, "factor_bootstrap": 20, "paired_bootstrap": 200,
       "paired_permutations": 500, "maps_for": 2}


def _leaderboard(run_dirs: Path, shared, out: Path) -> Path:
    """The lead's leaderboard over the two runs, with the paper's values for Qwen2.5-Omni."""
    import pandas as pd

    from agl.scoring import leaderboard

    board = leaderboard.collect(sorted((run_dirs / "runs").glob("*/metrics.json")), "paper")
    board.loc[board["run"] == "qwen", "paper_name"] = "Qwen2.5-Omni"
    paper = pd.read_csv(shared("data/agl1k/paper_leaderboard.csv"))
    leaderboard.write(leaderboard.attach_paper(board, paper), out, protocol="paper")
    return out / "leaderboard.csv"


@pytest.fixture(scope="module")
def cli_report(tmp_path_factory, run_dirs, agl1k_manifest, shared) -> tuple[Path, str, str]:
    """`agl report` over the two runs, with the lead's leaderboard and MLflow on SQLite, built
    once for the module: (its folder, what it printed, the tracking URI). (The report over
    1,444 clips costs about 10 CPU-seconds; both tests below read this one.)"""
    from helpers import run_agl

    root = tmp_path_factory.mktemp("report")
    board = _leaderboard(run_dirs, shared, root / "board")
    params = root / "params.yaml"
    params.write_text("report:\n" + "".join(f"  {k}: {v}\n" for k, v in CFG.items()))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MLFLOW_TRACKING_URI", uri)
        rc, out, err = run_agl("report", "--runs", str(run_dirs / "runs"), "--out", str(root / "report"),
                               "--params", str(params), "--manifest", str(agl1k_manifest),
                               "--leaderboard", str(board))
    assert rc == 0, out + err
    return root / "report", out, uri


def test_report_is_self_contained_and_renders(tmp_path, cli_report):
    out_dir, printed, _ = cli_report
    html_path = out_dir / "report.html"
    page = html_path.read_text()
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page)  # nothing fetched from outside
    assert "http://" not in page and "https://" not in page
    assert page.count("data:image/png;base64,") >= 5
    assert f"wrote {html_path} (2 runs: qwen, qwen-east)" in printed, printed
    assert (out_dir / "cdf" / "qwen.csv").exists()
    assert "4,540.1" in page and "7,777.2" in page  # the speech split, in the report
    assert "Unjudged" in page and "Refusal" in page
    assert "5476.83" in page  # the paper's value beside ours in the leaderboard
    _screenshot(html_path, tmp_path / "report.png")


def _screenshot(html_path: Path, png: Path) -> None:
    from helpers import require_chromium

    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.route(re.compile(r"^https?://"), lambda route: route.abort())  # no network
        page.goto(html_path.resolve().as_uri())
        for sel in ("#leaderboard", "#cdf", "#map-qwen", "#error-modes", "#speech-qwen"):
            page.locator(sel).scroll_into_view_if_needed()
            assert page.locator(sel).is_visible(), sel
        for img in ("#cdf", "#map-qwen"):  # decoded, not a broken image
            assert page.eval_on_selector(img, "e => e.complete && e.naturalWidth > 300"), img
        assert page.locator("#leaderboard tbody tr").count() == 2
        # the interactive map: one point per clip with a coordinate, each with its tooltip
        # (a clip within 10 degrees of the date line has a second circle at the other edge)
        # who the models fail: groups by income (the pooled lower group named), disparity, magnets
        for sel in ("#fairness-section", "#fairness-income-qwen", "#disparity-income-qwen",
                    "#magnets-qwen", "#magnets-map-qwen"):
            page.locator(sel).scroll_into_view_if_needed()
            assert page.locator(sel).is_visible(), sel
        income = page.locator("#fairness-income-qwen tbody").inner_text()
        assert "Low + Lower middle *" in income and "insufficient data (n = 8, needs 10)" in income
        assert page.locator("#magnets-qwen tbody tr").first.inner_text().startswith("United States")
        assert page.locator("#magnets-map-qwen circle").count() >= 20
        assert "named 316 times" in page.locator("#magnets-map-qwen title").first.text_content()
        page.locator("#magnets-map-qwen").screenshot(path=str(png.with_name("magnets.png")))
        assert page.locator("#svgmap-qwen g").count() == 1442
        assert page.locator("#svgmap-qwen circle").count() >= 1442
        tip = page.locator("#svgmap-qwen g title").first.text_content()
        assert tip.startswith("aporee_") and "true:" in tip and "error:" in tip
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(png), full_page=True)
        browser.close()
    assert not [u for u in requests if not u.startswith(("file:", "data:"))]
    assert png.stat().st_size > 50_000


@pytest.mark.slow
def test_agl_report_cli_logs_to_mlflow(cli_report, agl1k_manifest):
    import mlflow

    from agl.dataset.manifest import content_hash

    _, _, uri = cli_report
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments)
    key = "report/paper/" + content_hash(agl1k_manifest)[:12]
    report_runs = [r for r in runs if r.data.tags.get("agl.run_key") == key]
    assert len(report_runs) == 1
    names = {a.path for a in client.list_artifacts(report_runs[0].info.run_id)}
    assert {"report.html", "plots", "tables"} <= names
    assert report_runs[0].data.metrics["error_modes.qwen.Refusal"] > 0


def test_no_runs_is_one_clear_error(tmp_path, capsys):
    from agl.cli import main

    rc = main(["report", "--runs", str(tmp_path), "--out", str(tmp_path / "r"), "--params",
               str(tmp_path / "none.yaml"), "--no-track"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "no evaluated runs found" in err and err.count("\n") == 1


def test_bad_params_are_one_clear_line(tmp_path, capsys):
    from agl.cli import main

    params = tmp_path / "params.yaml"
    for text, expect in (("report:\n  group_bootstrap: lots\n", "report.group_bootstrap: 'lots' is not"),
                         ("report:\n  bootstrapp: 10\n", "unknown key(s) bootstrapp"),
                         ("report:\n  judge: {backend: gemini}\n", "report.judge: set model")):
        params.write_text(text)
        rc = main(["report", "--runs", str(tmp_path), "--params", str(params), "--no-track"])
        err = capsys.readouterr().err
        assert rc == 2 and expect in err and err.count("\n") == 1, err
