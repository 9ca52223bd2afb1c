"""Runs on different data are never ranked or compared together: the leaderboard and the report
have one table / section per data version, paired tests pair only runs on the same data, and
headless Chromium shows each dataset's own leaderboard table."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pandas as pd
import pytest
from factories import manifest, prediction
from test_report import ARGS, CHROMIUM

from agl.dataset.manifest import write_manifest
from agl.predictions.records import write_predictions

CITIES = [
    ("Paris", "France", "Europe", 48.86, 2.35),
    ("Lima", "Peru", "South America", -12.05, -77.04),
    ("Tokyo", "Japan", "Asia", 35.68, 139.69),
    ("Nairobi", "Kenya", "Africa", -1.29, 36.82),
]


def _dataset(root: Path, name: str, n: int, title: str) -> Path:
    rows = []
    for i in range(n):
        city, country, continent, lat, lon = CITIES[i % len(CITIES)]
        rows.append(
            {
                "key": f"{name}_{i}",
                "city": city,
                "country": country,
                "continent": continent,
                "latitude": lat,
                "longitude": lon,
                "title": f"{title} {i}",
                "short_key": i,
                "human_sounds": 1.0 if i % 3 == 0 else 0.0,
                "description": "",
            }
        )
    path = root / f"{name}.csv"
    write_manifest(manifest(rows), path)
    return path


def _run(root: Path, name: str, manifest_path: Path, keys: list[str], shift: float) -> None:
    from agl.dataset.manifest import load_manifest
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    m = load_manifest(manifest_path).set_index("key")
    preds = [
        prediction(
            k,
            lat=m.at[k, "latitude"],
            lon=m.at[k, "longitude"] + shift,
            city=m.at[k, "city"],
            country=m.at[k, "country"] if shift < 5 else "Chile",
            continent=m.at[k, "continent"],
        )
        for k in keys
    ]
    out = root / "runs" / name
    write_predictions(out / "predictions.jsonl", preds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluate_run(
            run=name,
            predictions_path=out / "predictions.jsonl",
            manifest_path=manifest_path,
            out_dir=out,
            config=EvaluateConfig(protocols=["paper"], metric_bootstrap=20, track=False),
        )


@pytest.fixture(scope="module")
def two_datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    real = _dataset(root, "real", 24, "Field recording")
    demo = _dataset(root, "demo", 12, "SYNTHETIC clip")
    keys_real = [f"real_{i}" for i in range(24)]
    _run(root, "full-good", real, keys_real, 0.5)
    _run(root, "full-bad", real, keys_real, 20.0)
    _run(root, "subset-best", real, keys_real[:6], 0.0)  # best numbers, but 6 / 24 clips
    _run(root, "demo-a", demo, [f"demo_{i}" for i in range(12)], 1.0)
    _run(root, "demo-b", demo, [f"demo_{i}" for i in range(12)], 30.0)
    return root, real, demo


def test_report_has_one_section_per_data_version(tmp_path, two_datasets):
    from agl.report.build import make_report
    from agl.report.inputs import ReportConfig, ReportInputs
    from agl.scoring import leaderboard

    root, real, _ = two_datasets
    board = leaderboard.collect(sorted((root / "runs").glob("*/metrics.json")), "paper", full_coverage=0.99)
    assert board["run"].tolist() == ["full-good", "full-bad", "subset-best", "demo-a", "demo-b"]
    leaderboard.write(leaderboard.attach_paper(board, None), tmp_path, protocol="paper")
    md = (tmp_path / "leaderboard.md").read_text()
    assert md.count("## ") == 2 and md.count("SYNTHETIC") == 1  # the demo's header only
    assert "| 3 | subset-best * | subset-best | 6 / 24 |" in md

    cfg = {
        "group_bootstrap": 20,
        "factor_bootstrap": 5,
        "paired_bootstrap": 50,
        "paired_permutations": 50,
        "maps_for": 2,
        "min_country_clips": 2,
    }
    summary = make_report(
        ReportInputs(run_dirs=(root / "runs",), leaderboard_csv=tmp_path / "leaderboard.csv", manifest=real),
        tmp_path / "report",
        ReportConfig.from_params({**cfg, "track": False}),
    )
    groups = list(summary["data_versions"].values())
    assert sorted(map(sorted, groups)) == [["demo-a", "demo-b"], ["full-bad", "full-good", "subset-best"]]
    for version, runs in summary["data_versions"].items():
        paired = pd.read_csv(tmp_path / "report" / "tables" / f"paired_{version[:12]}.csv")
        assert set(paired["a"]) | set(paired["b"]) <= set(runs)  # never across datasets
    page = Path(summary["html"]).read_text()
    assert page.count("class='leaderboard'") == 2 and page.count("<section class='data-version'") == 2
    assert "not comparable" in page
    _screenshot_tables(Path(summary["html"]), tmp_path / "report.png")


def _screenshot_tables(html_path: Path, png: Path) -> None:
    from helpers import require_chromium

    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(html_path.resolve().as_uri())
        tables = page.locator("table.leaderboard")
        assert tables.count() == 2
        for i, want in enumerate((3, 2)):
            assert tables.nth(i).is_visible() and tables.nth(i).locator("tbody tr").count() == want
        heads = page.locator("#leaderboard-section h3").all_text_contents()
        assert len(heads) == 2 and "24 clips" in heads[0] and "SYNTHETIC" in heads[1]
        assert page.locator("h2.data-version").count() == 2
        page.screenshot(path=str(png), full_page=False)
        page.locator("h2.data-version").nth(1).scroll_into_view_if_needed()
        page.screenshot(path=str(png.with_name("second.png")), full_page=False)
        browser.close()
    assert png.stat().st_size > 20_000 and not math.isnan(png.stat().st_size)


def test_a_cut_or_short_score_table_is_refused_by_the_report(tmp_path):
    """The report scores nothing from a table that is not whole: cut mid-row, or fewer rows
    than its metrics.json scored."""
    import json

    from agl.errors import AglError
    from agl.report.inputs import collect_runs

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"run": "r", "protocols": {"paper": {"n": 3}}}))
    rows = "sample_id,has_speech,refused,failed\na,False,False,False\nb,False,False,False\n"
    (run / "scores_paper.csv").write_text(rows + "c,False,Fal")
    with pytest.raises(AglError, match="ends mid-row .2 complete row"):
        collect_runs([tmp_path / "runs"], "paper")
    (run / "scores_paper.csv").write_text(rows)
    with pytest.raises(AglError, match="2 row.s., but .* scored 3: a cut or stale table"):
        collect_runs([tmp_path / "runs"], "paper")
    (run / "scores_paper.csv").write_text(rows + "c,False,False,False\n")
    assert len(collect_runs([tmp_path / "runs"], "paper")[0].scored) == 3
