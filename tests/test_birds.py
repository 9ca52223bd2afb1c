"""BirdNET tagging and the birdrange backend on the two real Aporee clips in ../shared.

One session: the acoustic model listens to each clip once (through one birdrange backend on
a coarse 2-degree grid, built once into a temporary cache), and every test reads from that.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agl.backends import get_backend
from agl.dataset.manifest import CATEGORY_COLUMNS, clips, load_manifest

BERLIN = (
    "aporee_5201_6631",
    "AmselanDietersFensterJuni2003Edit.mp3",
    52.5346,
    13.4195,
    "Berlin",
    "Germany",
    "Europe",
    "",
)
ESSAOUIRA = (
    "aporee_26839_30948",
    "20020207EssaouiraRempartsMuezzin.mp3",
    31.5125,
    -9.7700,
    "Essaouira",
    "Morocco",
    "Africa",
    "",
)
NOISE = ("synthetic_noise", "noise.wav", 0.0, 0.0, "", "", "", "2003-06-15")
RESOLUTION = 3.0  # coarse grid for tests: ~2,450 land cells, built in seconds


@pytest.fixture(scope="session")
def bird_run(tmp_path_factory, archive_dir):
    """run_inference of birdrange over Berlin and Essaouira (undated, as AGL1K is: the
    year-round grid) and white noise (dated: the week is read, but nothing is heard)."""
    import soundfile as sf

    from agl.contracts.models import ModelSpec
    from agl.inference.model_run import run_inference
    from agl.inference.runner import RunOptions
    from agl.predictions.records import read_predictions
    from agl.prompts import load_prompt

    root = tmp_path_factory.mktemp("birds")
    audio = root / "audio"
    rows = []
    for key, name, lat, lon, city, country, continent, day in (BERLIN, ESSAOUIRA, NOISE):
        (audio / key).mkdir(parents=True)
        if key == NOISE[0]:
            rng = np.random.default_rng(0)
            sf.write(audio / key / name, (0.1 * rng.standard_normal(6 * 48_000)).astype(np.float32), 48_000)
        else:
            (audio / key / name).symlink_to(archive_dir / key / name)
        rows.append(
            {
                "key": key,
                "mp3name": name,
                "latitude": lat,
                "longitude": lon,
                "mp3seconds": 1.0,
                "city": city,
                "country": country,
                "continent": continent,
                **{c: 0.0 for c in CATEGORY_COLUMNS},
                "date": day,
            }
        )
    pd.DataFrame(rows).to_csv(root / "m.csv", index=False)  # AGL1K's columns plus `date`
    cl = clips(load_manifest(root / "m.csv"))
    backend = get_backend("birdrange")("birdnet-v2.4-range", resolution_deg=RESOLUTION, cache_dir=str(root / "cache"))
    run_inference(
        ModelSpec("run", "birdrange", "birdnet-v2.4-range",
                  settings={"resolution_deg": RESOLUTION, "cache_dir": str(root / "cache")}),
        load_prompt(),
        cl,
        out_dir=root / "run",
        audio_root=audio,
        options=RunOptions(concurrency=1, progress=False),
        backend=backend,
    )
    return {
        "preds": read_predictions(root / "run" / "predictions.jsonl"),
        "backend": backend,
        "cache": root / "cache",
        "clips": {c.key: c for c in cl},
    }


def test_berlin_hears_blackbird_and_guesses_europe(bird_run):
    from agl.core.geo import geodesic_km

    p = bird_run["preds"][BERLIN[0]]
    species = [s for s, _ in p.meta["species_weights"]]
    assert "Turdus merula" in species
    assert p.status.value == "ok" and p.continent == "Europe"
    km = float(geodesic_km(p.latitude, p.longitude, BERLIN[2], BERLIN[3]))
    assert km < 2500, (km, p.reasoning)
    assert p.meta["week"] == -1  # no date in the manifest: year-round
    assert "Turdus merula" in p.reasoning and "Driven by" in p.reasoning


def test_essaouira_detections_include_a_non_bird_class(bird_run):
    p = bird_run["preds"][ESSAOUIRA[0]]
    from agl.birds.birdnet import OTHER_CATEGORY

    assert set(p.meta["other_classes"]) & set(OTHER_CATEGORY)


def test_noise_abstains_never_guesses(bird_run):
    p = bird_run["preds"][NOISE[0]]
    assert p.status.value == "refused" and p.refused
    assert p.latitude is None and p.longitude is None
    assert "no species" in p.raw_reply
    assert bird_run["backend"]._weeks == {BERLIN[0]: -1, ESSAOUIRA[0]: -1, NOISE[0]: 23}


def test_grid_is_cached_and_reused(bird_run):
    from agl.birds.range_model import YEAR_ROUND, load_or_build

    files = sorted(bird_run["cache"].glob("*.npz"))
    assert len(files) == 1  # year-round, built once for both clips (noise needs none)
    grid, built = load_or_build(bird_run["cache"], resolution_deg=RESOLUTION, week=YEAR_ROUND, floor=0.01)
    assert not built and grid.size > 2000
    assert np.all(np.abs(grid.lat) < 90) and grid.country.size == grid.size


def test_invert_names_the_species_that_drove_it(bird_run):
    from agl.birds.range_model import YEAR_ROUND, invert, reasoning

    grid = bird_run["backend"].grid(YEAR_ROUND)
    guess = invert(grid, [("Turdus merula", 0.9), ("Larus michahellis", 0.8)])
    assert {d.scientific for d in guess.drivers} == {"Turdus merula", "Larus michahellis"}
    assert guess.continent in ("Europe", "Africa")
    text = reasoning(guess, YEAR_ROUND, RESOLUTION)
    assert "year-round" in text and "Larus michahellis" in text
    with pytest.raises(Exception, match="not a BirdNET class"):
        invert(grid, [("Turdus imaginarius", 1.0)])


def test_week_of_dates():
    from agl.birds.range_model import YEAR_ROUND, week_of
    from agl.errors import AglError

    assert week_of("") == YEAR_ROUND and week_of("nan") == YEAR_ROUND
    assert week_of("2003-01-01") == 1 and week_of("2003-12-31") == 48
    assert week_of("2003-06-15") == 23 and week_of("2003-06-22") == 24
    with pytest.raises(AglError, match="ISO date"):
        week_of("June 2003")


def test_windows_and_thresholds():
    from agl.birds.birdnet import BirdConfig, detect, labels, windows

    assert windows(np.zeros(48_000 * 7)).shape == (2, 144_000)  # 1 s tail dropped
    assert windows(np.zeros(48_000 * 8)).shape == (3, 144_000)  # 2 s tail padded
    assert windows(np.zeros(1000)).shape == (1, 144_000)
    labs = labels()
    j = next(i for i, lab in enumerate(labs) if lab.scientific == "Turdus merula")
    k = next(i for i, lab in enumerate(labs) if lab.scientific == "Siren")
    probs = np.zeros((3, len(labs)))
    probs[[0, 2], j] = [0.9, 0.6]
    probs[1, k] = 0.55
    found = detect(probs, 8.0, BirdConfig(min_confidence=0.5, min_confidence_other=0.6))
    assert [(d.scientific, d.windows, d.seconds) for d in found] == [("Turdus merula", 2, 5.0)]
    assert math.isclose(found[0].max_confidence, 0.9)


def test_birds_breakdown_is_a_partition():
    from agl.report.sections.birds import by_birds

    scored = pd.DataFrame(
        {
            "sample_id": ["a", "b", "c", "d"],
            "distance_km": [10.0, 20.0, 30.0, np.nan],
            **{f"{lv}_correct": [1.0, 0.0, 1.0, np.nan] for lv in ("continent", "country", "city")},
            "refused": [False, False, False, True],
            "failed": [False] * 4,
        }
    )
    t = by_birds(scored, {"a": "birds heard", "b": "no birds heard", "c": "birds heard"}, bootstrap=50, seed=0)
    assert dict(zip(t["group"], t["n"], strict=True)) == {"birds heard": 2, "no birds heard": 1, "not listened": 1}
    assert t["n"].sum() == 4 and math.isclose(t.loc[0, "mean_km"], 20.0)


def test_unknown_setting_is_one_clear_error():
    from agl.errors import AglError

    expected = r"^birdrange settings: unknown key\(s\) resolutoin_deg; known: .*resolution_deg"
    with pytest.raises(AglError, match=expected):
        get_backend("birdrange")("x", resolutoin_deg=1.0)


def test_report_section_maps_the_surface(bird_run, tmp_path):
    """The report's Birds section on the real clips: breakdown, paired table and the map."""
    from agl.report.inputs import ReportOptions, RunInput
    from agl.report.sections.birds import birds_section

    preds = bird_run["preds"]
    truth = bird_run["clips"]

    def scored(name, guess):
        rows = []
        for key, c in truth.items():
            lat, lon = guess(key)
            rows.append(
                {
                    "sample_id": key,
                    "true_lat": c.latitude,
                    "true_lon": c.longitude,
                    "pred_lat": lat,
                    "pred_lon": lon,
                    "distance_km": 10000.0 if lat is None else 1000.0,
                    "continent_correct": np.nan,
                    "country_correct": np.nan,
                    "city_correct": np.nan,
                    "refused": lat is None,
                    "failed": False,
                }
            )
        return pd.DataFrame(rows)

    run_dir = tmp_path / "runs" / "birdrange"
    run_dir.mkdir(parents=True)
    (run_dir / "run_summary.json").write_text(
        json.dumps(
            {"backend": "birdrange", "settings": {"resolution_deg": RESOLUTION, "cache_dir": str(bird_run["cache"])}}
        )
    )
    br = RunInput(
        "birdrange",
        scored("birdrange", lambda k: (preds[k].latitude, preds[k].longitude)),
        preds,
        {"metrics": str(run_dir / "metrics.json")},
    )
    other = RunInput("prior", scored("prior", lambda k: (48.85, 2.35)), None, {})
    birds = tmp_path / "birds.csv"
    pd.DataFrame(
        {"key": [BERLIN[0], ESSAOUIRA[0], NOISE[0]], "status": ["ok"] * 3, "birds_heard": [True, True, False]}
    ).to_csv(birds, index=False)
    (tmp_path / "figs").mkdir()
    (tmp_path / "tables").mkdir()
    page = birds_section(
        [br, other],
        birds,
        tmp_path / "figs",
        tmp_path / "tables",
        options=ReportOptions(group_bootstrap=50, paired_bootstrap=50, paired_permutations=50),
    )
    assert "abstained on 1 of 3" in page and "birds-paired" in page
    assert (tmp_path / "figs" / "birdrange_surface.png").stat().st_size > 10_000
    paired = pd.read_csv(tmp_path / "tables" / "birds_paired.csv")
    assert paired.set_index("metric").at["distance_km", "n"] == 2  # the birds-heard clips


def test_birds_stage_writes_tables(tmp_path):
    """stages/birds.py on white noise, a missing file and a clip the filter dropped."""
    import subprocess
    import sys

    import soundfile as sf

    audio = tmp_path / "audio"
    rows = []
    for key in ("noise", "gone", "dropped"):
        (audio / key).mkdir(parents=True)
        rows.append({"key": key, "mp3name": "x.wav", "latitude": 1.0, "longitude": 2.0,
                     "mp3seconds": 4.0, "city": "", "country": "", "continent": "",
                     **{c: 0.0 for c in CATEGORY_COLUMNS}})  # fmt: skip
    rng = np.random.default_rng(0)
    sf.write(audio / "noise" / "x.wav", (0.1 * rng.standard_normal(4 * 16_000)).astype(np.float32), 16_000)
    pd.DataFrame(rows).to_csv(tmp_path / "m.csv", index=False)
    pd.DataFrame({"key": ["noise", "gone", "dropped"], "passed": [True, True, False]}).to_csv(
        tmp_path / "filter.csv", index=False
    )
    (tmp_path / "params.yaml").write_text("birds: {threads: 1, batch_size: 4}\n")
    out = tmp_path / "out"
    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, str(repo / "stages" / "birds.py"), "--manifest", str(tmp_path / "m.csv"),
           "--audio-root", str(audio), "--filter", str(tmp_path / "filter.csv"),
           "--out", str(out / "birds.csv"), "--detections", str(out / "det.jsonl"),
           "--summary", str(out / "summary.json"), "--params", str(tmp_path / "params.yaml")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(out / "birds.csv", keep_default_na=False)
    assert table["key"].tolist() == ["gone", "noise"]  # sorted; the dropped clip skipped
    assert table.set_index("key").at["noise", "birds_heard"] == "False"
    assert table.set_index("key").at["gone", "status"] == "missing"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped_by_filter"] == 1 and summary["birds_heard"] == 0
    assert "CC BY-NC-SA 4.0" in summary["licence"]
    lines = [json.loads(line) for line in (out / "det.jsonl").read_text().splitlines()]
    assert [d["key"] for d in lines] == ["gone", "noise"]
