"""Benchmark: the clip explorer on 1,444 clips x 20 runs, in headless Chromium (Debian's).

Synthetic outputs in the pipeline's layout: a manifest of N clips (random places, titles of a
few words), R runs with a guess per clip (noise of 20 km to 8,000 km around the truth, 10%
refusals, 2% failures) and ~400 characters of reasoning each, score tables from the paper
protocol. No audio (the list and the map do not need it). Then, served by `agl explore`
(in-process) and exported and opened from file://:

  startup          reading the outputs and building the list's data (Python)
  first render     navigation start -> the list rendered in the page (its data loaded)
  filter           a change of one filter: the list re-filtered, re-sorted and its rows
                   rebuilt (in the page's own clock) / the same until painted (two animation
                   frames, so >= ~33 ms at 60 Hz), medians of `--repeat`
  free text        the first text query loads the titles and reasoning (data/text.js)
  clip page        a row clicked -> the clip's page with every run's marker on the map
  scroll           a jump to the end of the list -> its rows painted

Run: python benchmarks/explore_speed.py [--clips 1444] [--runs 20] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
WORDS = ("harbour gulls wind traffic church bells market vendors speaking a language that "
         "sounds like Portuguese with a tram passing and waves breaking near a promenade "
         "the birdsong suggests a temperate climate in spring").split()


def make_outputs(root: Path, n: int, runs: int, seed: int = 0) -> Path:
    from agl.core import canonical
    from agl.dataset.manifest import CATEGORY_COLUMNS, write_manifest
    from agl.predictions.records import Prediction, Status, write_predictions
    from agl.scoring.evaluate import score_run

    rng = np.random.default_rng(seed)
    continents = ["Europe", "Asia", "Africa", "North America", "South America", "Oceania"]
    countries = [f"Country {i:02d}" for i in range(72)]
    frame = pd.DataFrame({
        "key": [f"aporee_{i}_{i + 7}" for i in range(n)],
        "latitude": rng.uniform(-60, 70, n).round(4), "longitude": rng.uniform(-180, 180, n).round(4),
        "mp3name": [f"clip{i}.mp3" for i in range(n)], "mp3seconds": rng.uniform(20, 300, n).round(1),
        "city": [f"City {i % 400}" for i in range(n)],
        "country": [countries[i % 72] for i in range(n)],
        "continent": [continents[i % 6] for i in range(n)],
        "title": [" ".join(rng.choice(WORDS, 5)) for _ in range(n)],
        **{c: rng.choice([0.0, 0.5, 1.0], n) for c in CATEGORY_COLUMNS},
    })
    write_manifest(frame, root / "data" / "manifest.csv")
    # Clips differ in difficulty and runs in skill, so some clips defeat every run (as in
    # AGL1K, where about a third do) and the filters keep realistic shares.
    difficulty = rng.uniform(0, 1, n)
    for r in range(runs):
        skill = 0.3 + 0.6 * r / max(runs - 1, 1)
        preds = []
        for d, row in zip(difficulty, frame.itertuples(index=False), strict=True):
            u = rng.random()
            reasoning = " ".join(rng.choice(WORDS, 65))
            right = rng.random() < skill * (1 - d) ** 2
            spread = 0.3 if right else 40.0
            if u < 0.02:
                preds.append(Prediction(row.key, Status.FAILED, error="timeout"))
            elif u < 0.12:
                preds.append(Prediction(row.key, Status.REFUSED, refused=True, reasoning=reasoning))
            else:
                lat = float(np.clip(row.latitude + rng.normal(0, spread), -89, 89))
                lon = float((row.longitude + rng.normal(0, spread * 2) + 180) % 360 - 180)
                preds.append(Prediction(row.key, Status.OK, latitude=round(lat, 4), longitude=round(lon, 4),
                                        city=row.city, country=row.country if right else "Elsewhere",
                                        continent=row.continent, reasoning=reasoning))
        folder = root / "build" / "runs" / f"run{r:02d}"
        folder.mkdir(parents=True)
        write_predictions(folder / "predictions.jsonl", preds)
        canonical.write_csv(score_run(frame, preds, "paper"), folder / "scores_paper.csv")
    return root


FILTER_CHANGE = """async ([id, value]) => {
    const el = document.getElementById(id);
    el.value = value;
    const text = id === "f-q";
    let t0 = performance.now();
    el.dispatchEvent(new Event(text ? "input" : "change"));
    if (text) {  // the text box waits 150 ms for more typing: timed from when it stops waiting
        await new Promise((r) => setTimeout(r, 150));
        t0 = performance.now();
        const want = new URLSearchParams({ q: value }).toString();
        const shown = () => document.body.dataset.rendered;
        while (!(value ? shown().includes(want) : !shown().includes("q="))) {
            await new Promise((r) => setTimeout(r, 2));
        }
    }
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    return { ms: performance.now() - t0, count: +document.body.dataset.count,
             compute_ms: +document.body.dataset.renderMs, rows: document.querySelectorAll("a.row").length };
}"""
SCROLL = """async () => {
    const v = document.getElementById("viewport");
    const t0 = performance.now();
    v.scrollTop = v.scrollHeight;
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    return { ms: performance.now() - t0, rows: document.querySelectorAll("a.row").length };
}"""


def measure(browser, url: str, runs: int, repeat: int) -> dict[str, str]:
    out: dict[str, str] = {}
    firsts = []
    for _ in range(repeat):
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        firsts.append(float(page.evaluate("document.body.dataset.readyMs")))
        page.close()
    out["first render"] = f"{statistics.median(firsts):.0f} ms (median of {repeat})"
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    steps = [("f-every", "wrong", "every run wrong"), ("f-every", "", "(cleared)"),
             ("f-continent", "Europe", "continent Europe"), ("f-only", "run00", "only run00 right"),
             ("f-only", "", "(cleared)"), ("f-any", "refused", "some run refused"),
             ("f-continent", "", "(cleared)"), ("f-any", "", "(cleared)")]
    timings: dict[str, list[float]] = {}
    computes: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for _ in range(repeat):
        for id_, value, label in steps:
            r = page.evaluate(FILTER_CHANGE, [id_, value])
            timings.setdefault(label, []).append(r["ms"])
            computes.setdefault(label, []).append(r["compute_ms"])
            counts[label] = r["count"]
            out["rows in the page"] = f"{r['rows']} of {r['count']} clips x {runs} runs (virtualised)"
    for label, ms in timings.items():
        what = f"-> {counts[label]} clips" if label != "(cleared)" else "-> all clips"
        name = f"filter: {label}" if label != "(cleared)" else "filter: clear one filter"
        out[name] = (f"{statistics.median(computes[label]):.1f} / {statistics.median(ms):.1f} ms {what}")
    first_q = page.evaluate(FILTER_CHANGE, ["f-q", "harbour gulls"])
    out["free text, first (loads text)"] = f"{first_q['ms']:.1f} ms -> {first_q['count']} clips"
    again = [page.evaluate(FILTER_CHANGE, ["f-q", w])["ms"] for w in ("tram", "promenade", "church")]
    out["free text, next"] = f"{statistics.median(again):.1f} ms"
    page.evaluate(FILTER_CHANGE, ["f-q", ""])
    sort = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        page.click('button.th[data-sort="run:run03"]')
        page.wait_for_function("() => document.querySelector('button.th.sorted')?.dataset.sort === 'run:run03'")
        sort.append((time.perf_counter() - t0) * 1000)
        page.click('button.th[data-sort="key"]')
    out["sort by one run's error (incl. driver round trip)"] = f"{statistics.median(sort):.1f} ms"
    out["scroll to the end"] = f"{page.evaluate(SCROLL)['ms']:.1f} ms"
    page.evaluate("""async () => {
        document.getElementById("viewport").scrollTop = 0;
        await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    }""")
    opens = []
    for k in range(repeat):
        key = page.locator("a.row").nth(k).get_attribute("data-key")
        t0 = time.perf_counter()
        page.locator(f"a.row[data-key='{key}']").click()
        page.wait_for_selector(f"body[data-clip='{key}']")
        page.wait_for_function(f"() => document.querySelectorAll('#map circle.guess').length >= {runs // 2}")
        opens.append((time.perf_counter() - t0) * 1000)
        page.go_back()
        page.wait_for_selector("body[data-view='list']")
    out["clip page (incl. driver round trip)"] = f"{statistics.median(opens):.0f} ms (first {opens[0]:.0f} ms: the map)"
    page.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=1444)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from agl.explore.export import export
    from agl.explore.server import ExploreServer
    from agl.explore.sources import ExplorePaths, load

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        make_outputs(root, args.clips, args.runs)
        print(f"synthetic outputs: {args.clips} clips x {args.runs} runs in {time.perf_counter() - t0:.1f} s")
        b = root / "build"
        paths = ExplorePaths(manifest=root / "data" / "manifest.csv", run_roots=(b / "runs",),
                             birds=None, speech=None, perturb=None, listen=None)
        t0 = time.perf_counter()
        ex = load(paths)
        server = ExploreServer(("127.0.0.1", 0), ex)
        startup = time.perf_counter() - t0
        threading.Thread(target=server.serve_forever, daemon=True).start()
        t0 = time.perf_counter()
        export(ex, root / "site", audio=False, spectrograms=False)
        exported = time.perf_counter() - t0
        sizes = {n: (root / "site" / "data" / n).stat().st_size for n in ("index.js", "text.js", "map.js")}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            served = measure(browser, server.url, args.runs, args.repeat)
            static = measure(browser, (root / "site" / "index.html").as_uri(), args.runs, args.repeat)
            version = browser.version
            browser.close()
        server.shutdown()
    print(f"Chromium {version}; {args.clips} clips x {args.runs} runs")
    print(f"startup (read outputs + build the list data): {startup:.2f} s; export (no audio): {exported:.2f} s")
    print("data files: " + ", ".join(f"{n} {s / 1024:.0f} KiB" for n, s in sizes.items()))
    width = max(len(k) for k in served)
    print(f"{'':{width}}  {'served':>34}  {'file://':>34}")
    for k in served:
        print(f"{k:{width}}  {served[k]:>34}  {static.get(k, ''):>34}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
