"""MLflow opens on the runs (issue 36): two runs evaluated by agl (`evaluate_run`, as the
evaluate stage calls it) into a SQLite store, a real `mlflow ui` on it, and Chromium doing what
a user does: open the URL agl printed, and click through from the experiments list. Both end on
the runs table with the headline metrics as columns, the runs' values in them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import warnings
from dataclasses import replace

import pytest
from helpers import NO_NETWORK, free_port, require_chromium

from agl.core.headline import run_metric_keys
from agl.core.mlflow_view import DEFAULT_UI, VIEW_NAME

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("mlflow_ui")]

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
PROTOCOLS = ["paper", "strict"]  # params.yaml's: both protocols' headline are columns


def _evaluate(root, qwen_published, agl1k_manifest) -> dict:
    """The authors' Qwen2.5-Omni and a copy moved 3 degrees east, evaluated and logged."""
    from agl.predictions.importer import import_published
    from agl.predictions.records import write_predictions
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    preds = import_published(qwen_published)
    east = [replace(p, longitude=((p.longitude + 183) % 360) - 180, original=None)
            if p.longitude is not None else replace(p, original=None) for p in preds]
    docs = {}
    for name, ps in (("qwen", preds), ("qwen-east", east)):
        path = root / "src" / name / "predictions.jsonl"
        write_predictions(path, ps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            docs[name] = evaluate_run(name, path, agl1k_manifest, root / "runs" / name,
                                      EvaluateConfig(protocols=PROTOCOLS, metric_bootstrap=10))
    return docs


def _start_ui(db, port: int, log) -> subprocess.Popen:
    env = {**os.environ, **NO_NETWORK, "NO_PROXY": "127.0.0.1,localhost",
           "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
           # as scripts/mlflow-server: no GenAI job runner (seven idle processes polling)
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", f"sqlite:///{db}",
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_health(base: str, proc: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + 240  # a loaded 2-core machine takes a minute
    while True:
        try:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"{base}/health", timeout=2).read()
            return
        except OSError:
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.5)


@pytest.fixture(scope="module")
def served(tmp_path_factory, qwen_published, agl1k_manifest):
    """`mlflow ui` on a SQLite store on a free port of 127.0.0.1, the two runs logged into it
    while it starts; its whole process group ends with the module."""
    import mlflow

    root = tmp_path_factory.mktemp("mlflow_ui")
    db = root / "mlflow.db"
    mlflow.MlflowClient(f"sqlite:///{db}").search_experiments()  # the schema, before the server
    port, log = free_port(), root / "ui.log"
    proc = _start_ui(db, port, log)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
            mp.setenv("AGL_CACHE_DIR", str(root / "cache"))
            mp.delenv("AGL_MLFLOW_EXPERIMENT", raising=False)
            docs = _evaluate(root, qwen_published, agl1k_manifest)
        base = f"http://127.0.0.1:{port}"
        _wait_health(base, proc, log)
        yield {"base": base, "docs": docs}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser(served):
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(require_chromium()), args=ARGS)
        yield browser
        browser.close()


def _page(browser):
    """A fresh browser profile (nothing remembered), wide enough for every column; only
    127.0.0.1 is reachable."""
    context = browser.new_context(viewport={"width": 2600, "height": 900})
    page = context.new_page()
    page.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/])"), lambda route: route.abort())
    page.set_default_timeout(90_000)
    return context, page


def _runs_table(page) -> dict[str, dict[str, str]]:
    """The runs table as shown: run name -> {column header: cell text}."""
    page.get_by_role("columnheader", name=run_metric_keys(PROTOCOLS)[0]).first.wait_for()
    # The header can be drawn before the rows (seen under load): read until two reads a moment
    # apart agree and name at least one run.
    before, deadline = None, time.monotonic() + 60
    while True:
        now = _read_rows(page)
        if (now and now == before) or time.monotonic() > deadline:
            return now
        before = now
        page.wait_for_timeout(300)


def _read_rows(page) -> dict[str, dict[str, str]]:
    rows = page.evaluate("""() => {
        const ids = {};
        for (const h of document.querySelectorAll('[role=columnheader][col-id]')) {
            const t = h.innerText.trim();
            if (t) ids[h.getAttribute('col-id')] = t;
        }
        const out = {};  // a row's cells sit in several containers (pinned, centre): merged
        for (const row of document.querySelectorAll('[role=row][row-index]')) {
            const cells = out[row.getAttribute('row-index')] ||= {};
            for (const c of row.querySelectorAll('[role=gridcell][col-id]'))
                cells[ids[c.getAttribute('col-id')] || c.getAttribute('col-id')] = c.innerText.trim();
        }
        return out;
    }""")
    # the run name's cell also holds its colour's code: the name is its last line
    return {cells["Run Name"].split("\n")[-1]: cells for _, cells in sorted(rows.items(), key=lambda kv: int(kv[0]))
            if cells.get("Run Name")}


def _check_headline(table: dict[str, dict[str, str]], docs: dict) -> None:
    assert set(table) == {"qwen", "qwen-east"}, table
    for name, doc in docs.items():
        for key in run_metric_keys(PROTOCOLS):
            protocol, metric = key.split(".", 1)
            value = doc["protocols"][protocol][metric]
            shown = table[name][key]  # the header is the metric's name
            assert shown and abs(float(shown.replace(",", "")) - value) <= max(1e-3 * abs(value), 1e-3), \
                (name, key, shown, value)


def test_the_url_agl_prints_opens_the_runs_with_headline_columns(browser, served, tmp_path):
    docs, ui = served["docs"], served["base"]
    url = docs["qwen-east"]["mlflow_url"]
    assert url == docs["qwen"]["mlflow_url"] and url.startswith(DEFAULT_UI + "/#/experiments/")
    context, page = _page(browser)
    started = time.monotonic()
    page.goto(url.replace(DEFAULT_UI, ui))  # `mlflow ui` on this test's port instead of 5000
    table = _runs_table(page)
    page.screenshot(path=str(tmp_path / "runs.png"))
    print(f"runs table shown in {time.monotonic() - started:.1f} s; {tmp_path / 'runs.png'}")
    _check_headline(table, docs)
    # sorted by the paper protocol's mean distance error, smallest first
    order = sorted(docs, key=lambda n: docs[n]["protocols"]["paper"]["distance_error_km"])
    assert list(table) == order
    assert page.get_by_text("Model training", exact=True).first.is_visible()
    context.close()


def test_clicking_through_from_the_experiments_list(browser, served, tmp_path):
    ui = served["base"]
    context, page = _page(browser)
    page.goto(ui + "/")
    page.get_by_text("Model training", exact=True).first.click()
    page.get_by_role("link", name="agl1k").first.click()
    page.get_by_role("button", name="Views").first.click()
    page.get_by_text(VIEW_NAME, exact=True).first.click()
    table = _runs_table(page)
    page.screenshot(path=str(tmp_path / "clicked.png"))
    print(tmp_path / "clicked.png")
    _check_headline(table, served["docs"])
    context.close()
