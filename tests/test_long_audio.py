"""Long audio: the `long_audio:` setting, the window planner (low-energy cuts, the tail rule)
and the vote on the sphere, on hand-made inputs (docs/inference.md#long-audio)."""

from __future__ import annotations

import numpy as np
import pytest

from agl.errors import AglError
from agl.inference.long_audio import (
    ENERGY_HOP_S,
    LongAudio,
    Window,
    covered_s,
    frame_energy,
    parse_long_audio,
    plan_windows,
    random_start,
    sent_s,
)
from agl.inference.window_vote import combine, combined_prediction, medoid_index, window_figures
from agl.predictions.records import Prediction, Status

# --- the setting ----------------------------------------------------------------------------


def test_parse_defaults_and_shorthand():
    assert parse_long_audio(None, "w") == LongAudio()
    cfg = parse_long_audio("windows", "w")
    assert cfg.mode == "windows" and cfg.window_s == 30.0 and cfg.windowed
    assert LongAudio().protocol() == {"mode": "native"}
    assert "heard_tolerance" not in cfg.protocol() and cfg.protocol()["window_s"] == 30.0


@pytest.mark.parametrize("value, words", [
    ({"mode": "chunks"}, "mode: 'chunks' is not one of native, multi_part, windows, truncate"),
    ({"window_s": "thirty"}, "window_s: 'thirty' is not a positive finite number"),
    ({"window_s": 0}, "window_s: 0 is not a positive finite number"),
    ({"overlap_s": -1}, "overlap_s: -1 is not a finite number, 0 or more"),
    ({"seed": 1.5}, "seed: 1.5 is not a seed"),
    ({"windw_s": 30}, "unknown key(s) windw_s"),
    ({"window_s": 30, "overlap_s": 30}, "overlap_s: 30 must be less than window_s 30"),
    ({"mode": "windows", "start": "random"}, "start: random picks the one window of mode truncate"),
    ({"split": "low_energy", "search_s": 40}, "search_s: 40 must be less than window_s"),
    ([1, 2], "is not a mapping"),
])
def test_parse_refuses_in_one_line(value, words):
    with pytest.raises(AglError) as err:
        parse_long_audio(value, "params.yaml: models.gem.long_audio")
    msg = str(err.value)
    assert words in msg and "\n" not in msg and msg.startswith("params.yaml: models.gem.long_audio")


# --- the planner ------------------------------------------------------------------------------


def test_windows_cover_a_130_s_clip_never_longer_than_the_window():
    cfg = LongAudio(mode="windows", window_s=30, min_tail_s=5)
    wins = plan_windows(130.0, cfg)
    assert wins == [Window(0, 30), Window(30, 60), Window(60, 90), Window(90, 120), Window(120, 130)]
    assert covered_s(wins) == 130.0 and sent_s(wins) == 130.0


def test_a_short_tail_slides_the_last_window_back():
    cfg = LongAudio(mode="windows", window_s=30, min_tail_s=10)
    wins = plan_windows(124.0, cfg)  # a 4-s tail: heard inside a full window ending at 124
    assert wins[-1] == Window(94.0, 124.0) and all(w.seconds <= 30 for w in wins)
    assert len(wins) == 5 and covered_s(wins) == 124.0 and sent_s(wins) == 150.0


def test_overlap_and_short_clips():
    wins = plan_windows(70.0, LongAudio(mode="windows", window_s=30, overlap_s=10, min_tail_s=0))
    assert wins == [Window(0, 30), Window(20, 50), Window(40, 70)]
    assert plan_windows(20.0, LongAudio(mode="windows")) == [Window(0, 20.0)]
    assert plan_windows(130.0, LongAudio()) == [Window(0, 130.0)]  # native


def test_truncate_first_and_seeded_random():
    assert plan_windows(130.0, LongAudio(mode="truncate")) == [Window(0, 30)]
    cfg = LongAudio(mode="truncate", start="random", seed=3)
    a = plan_windows(130.0, cfg, key="clip_1")
    assert a == plan_windows(130.0, cfg, key="clip_1")  # same clip, same window
    assert 0 <= a[0].start_s <= 100 and a[0].seconds == 30
    assert a != plan_windows(130.0, cfg, key="clip_2")
    assert random_start(130.0, cfg, "clip_1") != random_start(130.0, LongAudio(
        mode="truncate", start="random", seed=4), "clip_1")


def test_low_energy_cuts_at_the_known_silence():
    sr = 8000
    rng = np.random.default_rng(0)
    x = rng.normal(0, 0.3, 100 * sr).astype(np.float32)  # 100 s of noise
    silences = [(28.4, 28.7), (57.1, 57.3), (86.0, 86.4)]  # one in the 2 s before each nominal cut
    for a, b in silences:
        x[int(a * sr):int(b * sr)] = 0.0
    cfg = LongAudio(mode="windows", window_s=30, split="low_energy", search_s=2.0, min_tail_s=0)
    wins = plan_windows(100.0, cfg, energy=frame_energy(x, sr))
    cuts = [w.end_s for w in wins[:-1]]
    # 100-ms frames: the quietest point is inside each silence, 50 ms from its edges
    for cut, (a, b) in zip(cuts, silences, strict=True):
        assert a + 0.05 - ENERGY_HOP_S <= cut <= b - 0.05 + ENERGY_HOP_S, (cut, a, b)
    assert all(w.seconds <= 30 for w in wins) and covered_s(wins) == 100.0
    assert [w.start_s for w in wins[1:]] == cuts  # no gap, no overlap
    # fixed: the cuts stay where they were
    assert [w.end_s for w in plan_windows(100.0, LongAudio(mode="windows", min_tail_s=0))[:-1]] == [30, 60, 90]


# --- the vote on the sphere -----------------------------------------------------------------


def _w(country, lat, lon, *, conf=None, city=None, continent=None, status=Status.OK) -> Prediction:
    return Prediction("c", status, latitude=lat, longitude=lon, country=country, city=city,
                      continent=continent, confidence=conf, refused=status is Status.REFUSED)


def test_medoid_is_the_window_nearest_the_others():
    # Paris, Lyon, Marseille, Tokyo: Lyon is the medoid
    pts = [(48.86, 2.35), (45.76, 4.84), (43.30, 5.37), (35.68, 139.69)]
    assert medoid_index(pts) == 1
    assert medoid_index([]) is None
    assert medoid_index([(1.0, 2.0), (1.0, 2.0)]) == 0  # equal sums: the earlier window


def test_medoid_across_the_antimeridian():
    # Fiji-ish points on both sides of 180 degrees and one in Africa: a mean of longitudes
    # would land near 0 E; the medoid is one of the Pacific points.
    pts = [(-17.8, 179.9), (-17.7, -179.8), (-17.9, 179.7), (0.0, 20.0)]
    i = medoid_index(pts)
    assert i in (0, 1, 2)
    vote = combine([_w("Fiji", *p) for p in pts[:3]] + [_w("Congo", *pts[3])])
    assert vote.country == "Fiji" and abs(vote.longitude) > 179


def test_vote_is_confidence_weighted_plurality():
    wins = [_w("Morocco", 31.6, -8.0, conf=0.9, city="Marrakesh", continent="Africa"),
            _w("France", 48.86, 2.35, conf=0.3), _w("France", 45.76, 4.84, conf=0.3),
            _w("Spain", 40.4, -3.7, conf=0.2)]
    vote = combine(wins)
    assert vote.country == "Morocco"  # 0.9 > 0.6
    assert vote.country_weights == {"france": 0.6, "morocco": 0.9, "spain": 0.2}
    assert vote.agreement == pytest.approx(0.25)
    # without confidences each window is one vote: France
    assert combine([_w(p.country, p.latitude, p.longitude) for p in wins]).country == "France"


def test_names_are_one_vote_after_normalisation():
    wins = [_w("the Netherlands", 52.37, 4.9), _w("netherlands.", 51.92, 4.48), _w("Belgium", 50.85, 4.35)]
    vote = combine(wins)
    assert vote.country in ("the Netherlands", "netherlands.") and vote.agreement == pytest.approx(2 / 3)


def test_a_tie_goes_to_the_medoid_window():
    # two votes each; the medoid of all four points is Lyon (France)
    wins = [_w("Spain", 40.4, -3.7), _w("France", 45.76, 4.84, city="Lyon", continent="Europe"),
            _w("France", 48.86, 2.35), _w("Spain", 41.39, 2.17)]
    vote = combine(wins)
    assert vote.country == "France" and vote.medoid == 1
    assert (vote.latitude, vote.longitude, vote.city, vote.continent) == (45.76, 4.84, "Lyon", "Europe")
    # the mirror image: Barcelona is the point nearest the others, so Spain wins the tie
    wins2 = [_w("Spain", 41.39, 2.17), _w("France", 48.86, 2.35), _w("Spain", 39.47, -0.38),
             _w("France", 48.39, -4.49)]
    vote2 = combine(wins2)
    assert vote2.medoid == 0 and vote2.country == "Spain" and vote2.agreement == 0.5


def test_refusals_inside_some_windows():
    wins = [_w(None, None, None, status=Status.REFUSED), _w("Kenya", -1.29, 36.82, city="Nairobi"),
            _w(None, None, None, status=Status.UNPARSEABLE), _w("Kenya", -4.04, 39.67)]
    p = combined_prediction("c", wins, {})
    assert p.status is Status.PARTIAL or p.status is Status.OK
    assert p.country == "Kenya" and p.meta["window_vote"]["agreement"] == 1.0
    assert p.meta["window_vote"]["medoid_window"] in (1, 3)
    # every window refused: refused; a failed window fails the clip (retried, never scored)
    assert combined_prediction("c", [_w(None, None, None, status=Status.REFUSED)] * 2, {}).status is Status.REFUSED
    failed = Prediction("c", Status.FAILED, error="HTTP 503")
    p = combined_prediction("c", [wins[1], failed], {})
    assert p.status is Status.FAILED and p.error == "window 2 of 2 failed: HTTP 503"
    unparseable = combined_prediction("c", [_w(None, None, None, status=Status.UNPARSEABLE)], {})
    assert unparseable.status is Status.UNPARSEABLE and not unparseable.refused


def test_window_figures_oracle_and_first_window():
    wins = [{"status": "ok", "country": "France", "latitude": 48.86, "longitude": 2.35},
            {"status": "ok", "country": "Morocco", "latitude": 31.6, "longitude": -8.0},
            {"status": "ok", "country": "Morocco", "latitude": 33.57, "longitude": -7.59}]
    rec = Prediction("c", Status.OK, latitude=33.57, longitude=-7.59, country="Morocco",
                     meta={"windows": wins, "window_vote": {"agreement": 2 / 3}})
    single = Prediction("d", Status.OK, latitude=0.0, longitude=0.0, meta={"windows": wins[:1]})
    fig = window_figures([rec, single], {"c": (31.6, -8.0)})
    assert fig["n_windowed"] == 1 and fig["mean_windows"] == 3.0
    assert fig["window_agreement"] == pytest.approx(2 / 3) and fig["first_window_agrees"] == 0.0
    assert fig["oracle_mean_km"] == 0.0
    assert 200 < fig["combined_mean_km"] < 260 and fig["first_window_mean_km"] > 1800
    assert window_figures([single]) is None


# --- one model's protocols, paired (the counterfactual machinery) -----------------------------


def _protocol_run(folder, name, long_audio, km):
    """A run folder as evaluate and infer leave it: scores_paper.csv and run_summary.json."""
    import json

    import pandas as pd

    run = folder / name
    run.mkdir(parents=True)
    n = len(km)
    pd.DataFrame({"sample_id": [f"c{i}" for i in range(n)], "has_speech": [i % 2 == 0 for i in range(n)],
                  "true_continent": ["Europe"] * n, "true_lat": [10.0 * i for i in range(n)],
                  "true_lon": [0.0] * n, "true_city": ["x"] * n, "true_country": ["y"] * n,
                  "distance_km": km, "country_correct": [1.0] * n, "continent_correct": [1.0] * n},
                 ).to_csv(run / "scores_paper.csv", index=False)
    summary = {"backend": "gemini", "model": "m", **({"long_audio": long_audio} if long_audio else {})}
    (run / "run_summary.json").write_text(json.dumps(summary))


def test_long_audio_protocols_are_paired_like_an_intervention(tmp_path):
    """Three rows of one model (first 30 s, whole clip, random 30 s) on the same 8 clips: each
    against the first-30-s run, by site, with groups by quartile of clip length (two clips
    each), in a Holm family of their own; the report's table by length; another model's run
    in the list is one line."""
    import pandas as pd

    from agl.counterfactual.effects import EffectsConfig, collect_effects
    from agl.counterfactual.long_audio import long_audio_effects
    from agl.report.sections.counterfactual import _length_table

    first = {"mode": "truncate", "window_s": 30.0, "start": "first"}
    _protocol_run(tmp_path, "first30", first, [1000.0] * 8)
    _protocol_run(tmp_path, "whole", None, [1000.0, 1000.0, 900.0, 900.0, 500.0, 500.0, 100.0, 100.0])
    _protocol_run(tmp_path, "random30", {**first, "start": "random", "seed": 0}, [1000.0] * 8)
    durations = pd.Series([40.0, 50.0, 100.0, 110.0, 130.0, 140.0, 170.0, 180.0],
                          index=[f"c{i}" for i in range(8)])
    config = EffectsConfig(long_audio=[["first30", "whole", "random30"]], min_support=2,
                           effect_bootstrap=200, permutations=200, resampling_unit="site:25")
    table = collect_effects(tmp_path, tmp_path, tmp_path, config,
                            more=long_audio_effects(tmp_path, config, durations))
    km = table[table["metric"] == "distance_km"].set_index(["level", "group"])
    assert set(table["intervention"]) == {"long_audio"} and set(table["model"]) == {"first30"}
    assert km.loc[("whole", "all"), "kind"] == "the file as the backend takes it (native) vs first 30 s"
    assert km.loc[("random30", "all"), "kind"] == "random 30 s (seed 0) vs first 30 s"
    assert km.loc[("whole", "all"), "diff"] == -375.0 and km.loc[("whole", "all"), "n_clusters"] == 8
    quartiles = [g for g in km.loc["whole"].index if g.startswith("duration=")]
    assert quartiles == ["duration=Q1 (40-50 s)", "duration=Q2 (100-110 s)", "duration=Q3 (130-140 s)",
                         "duration=Q4 (170-180 s)"]
    # where hearing more helps: nothing on the shortest clips, 900 km on the longest
    assert [km.loc[("whole", q), "diff"] for q in quartiles] == [0.0, -100.0, -500.0, -900.0]
    assert km.loc[("random30", "all"), "diff"] == 0.0
    assert table["family"].str.startswith("first30: its long-audio protocols").all()
    html = _length_table(table)
    assert "Hearing more, by clip length" in html and "170-180 s" in html and "-900.0 [" in html

    _protocol_run(tmp_path, "other", None, [1.0] * 8)
    (tmp_path / "other" / "run_summary.json").write_text('{"backend": "openai", "model": "m2"}')
    with pytest.raises(AglError, match=r"^params.yaml counterfactual.long_audio: first30, other are not one model"):
        long_audio_effects(tmp_path, EffectsConfig(long_audio=[["first30", "other"]]), durations)
    with pytest.raises(AglError, match="is not a list of run lists"):
        EffectsConfig(long_audio=["first30"])


def test_the_leaderboard_says_what_each_run_heard(tmp_path):
    """A run whose summary names a long-audio protocol gets its `hears` words and a note under
    its table; a run that sent whole files none."""
    import json

    import pandas as pd

    from agl.scoring.leaderboard_table import _cut_and_tagged_notes
    from agl.scoring.marks import run_hearing

    for name, summary in (("w", {"long_audio": {"mode": "windows", "window_s": 30.0}}), ("n", {})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run_summary.json").write_text(json.dumps(summary))
    assert run_hearing(tmp_path / "w" / "metrics.json") == "whole clip, 30-s windows"
    assert run_hearing(tmp_path / "n" / "metrics.json") is None
    rows = pd.DataFrame({"run": ["w", "n"], "hears": ["whole clip, 30-s windows", None],
                         "protocol": ["paper", "paper"]})
    assert any(n.startswith("Long-audio protocols: w: whole clip, 30-s windows; every other run")
               for n in _cut_and_tagged_notes(rows))
