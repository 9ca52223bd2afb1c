"""The explorer's data: what it reads from the pipeline's outputs, the notes where something
is missing, the error bands, the export folder, and the command's one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from explore_outputs import HOSTILE, write_outputs

from agl.core.geo import geodesic_km
from agl.errors import AglError
from agl.explore import payload
from agl.explore.export import MARKER, export
from agl.explore.sources import ExplorePaths, load
from agl.explore.spectrogram import spectrogram_png


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    return write_outputs(tmp_path_factory.mktemp("outputs"))


def paths(root: Path, **kw) -> ExplorePaths:
    b = root / "build"
    base = dict(manifest=root / "data" / "manifest.csv", run_roots=(b / "runs", b / "paper"),
                birds=b / "curation" / "birds.csv", speech=b / "curation" / "speech.csv",
                perturb=b / "perturb", listen=b / "listen")
    return ExplorePaths(**{**base, **kw})


@pytest.fixture(scope="module")
def explorer(outputs):
    return load(paths(outputs))


def unwrap(script: bytes) -> tuple[str, dict]:
    """The name and data of one page data file (AGL_EXPLORE.receive(name, data);)."""
    text = script.decode("ascii")
    assert text.startswith("AGL_EXPLORE.receive(") and text.endswith(");\n")
    name, _, body = text[len("AGL_EXPLORE.receive("):-3].partition(",")
    return json.loads(name), json.loads(body)


def test_index_bands_and_verdicts_per_run(explorer):
    idx = payload.index_payload(explorer)
    assert [r["name"] for r in idx["runs"]] == ["alpha", "beta", "gamma"]
    assert idx["clips"]["key"] == ["k0", "k1", "k2", "k3"]
    alpha, beta, gamma = idx["band"]
    km = float(geodesic_km(np.array([48.8566]), np.array([2.3522]), np.array([48.0]), np.array([2.0]))[0])
    assert idx["km"][0][0] == pytest.approx(km, abs=0.06) and alpha[0] == 1  # 25-200 km
    assert beta[1:3] == [payload.REFUSED, payload.FAILED]
    assert gamma == [payload.NOT_SCORED] + [payload.NO_PREDICTION] * 3  # no score table
    assert idx["wrong"][0] == [0, 0, 1, 1] and idx["wrong"][1] == [1, 1, 1, 1]
    assert idx["wrong"][2] == [-1] * 4  # unscored: neither right nor wrong
    assert idx["clips"]["speech"] == [0, 1, 0, 0]
    assert idx["clips"]["birds"] == [1, 0, -1, -1]  # species heard; BirdNET did not listen: -1
    assert idx["clips"]["language"] is None  # no speech table
    assert len(idx["bands"]) == 10 and idx["bands"][payload.REFUSED]["label"] == "refused"


def test_notes_in_place_of_what_is_missing(explorer):
    gamma = next(r for r in explorer.runs if r.name == "gamma")
    assert any("not scored" in n and "scores_paper.csv not found" in n and "evaluate@gamma" in n
               for n in gamma.result.notes)
    clip2 = payload.clip_payload(explorer, 2)  # Nairobi: no audio, not in the perturb subset
    assert clip2["audio"]["url"] is None and "audio not present" in clip2["audio"]["note"]
    assert "k2.mp3 not found" in clip2["audio"]["note"]
    assert "not among the" in clip2["variants_note"] and clip2["variants"] == []
    assert clip2["birds"]["status"] == "not listened"
    assert "speech stage not run" in clip2["speech_note"]
    beta = next(g for g in clip2["runs"] if g["run"] == "beta")
    assert beta["status"] == "failed" and beta["error"] == "timeout after 120 s"
    gamma = next(g for g in clip2["runs"] if g["run"] == "gamma")
    assert gamma["note"] == "no prediction for this clip in this run"


def test_variants_each_runs_guess_and_how_far_it_moved(explorer):
    clip = payload.clip_payload(explorer, 0)
    masked, short = clip["variants"]
    assert (masked["id"], masked["label"], masked["kind"]) == ("mask_speech.default", "mask_speech", "mask_speech")
    assert masked["audio"]["url"] == "media/0/mask_speech.default.mp3"
    alpha = next(g for g in masked["runs"] if g["run"] == "alpha")
    moved = float(geodesic_km(np.array([48.0]), np.array([2.0]), np.array([40.4168]), np.array([-3.7038]))[0])
    assert alpha["moved_km"] == pytest.approx(moved, abs=0.06) and alpha["city"] == "Madrid"
    assert alpha["delta_km"] == pytest.approx(alpha["km"] - clip["runs"][0]["km"], abs=0.11)
    beta = next(g for g in masked["runs"] if g["run"] == "beta")
    assert "did not listen" in beta["note"] and "band" not in beta
    assert all("did not listen" in g["note"] for g in short["runs"])  # perturbed, never heard
    tokyo = payload.clip_payload(explorer, 1)["variants"][0]
    assert tokyo["audio"]["url"] is None and "not found" in tokyo["audio"]["note"]
    assert payload.media_files(explorer, 0).keys() == {"original", "mask_speech.default", "truncate.seconds_3"}


def test_birds_with_names_and_confidences(explorer):
    birds = payload.clip_payload(explorer, 0)["birds"]
    assert birds["species"][0]["common"] == "Eurasian Blackbird"
    assert birds["species"][0]["max_confidence"] == 0.91


def test_model_text_travels_as_data_never_markup(explorer):
    name, clip = unwrap(payload.script("clip:0", payload.clip_payload(explorer, 0)))
    assert name == "clip:0" and clip["runs"][0]["reasoning"] == HOSTILE
    raw = payload.script("clip:0", payload.clip_payload(explorer, 0))
    assert raw.isascii() and b"\n" not in raw[:-1]  # one line of ASCII: no byte ends the call
    _, text = unwrap(payload.script("text", payload.text_payload(explorer)))
    assert HOSTILE in text["text"][0] and text["text"][0].startswith("Paris <b>market</b>")


def test_nothing_optional_is_required(outputs, tmp_path):
    ex = load(paths(outputs, run_roots=(tmp_path / "none",), birds=None, speech=None,
                    perturb=tmp_path / "none", listen=None))
    idx = payload.index_payload(ex)
    assert idx["runs"] == [] and idx["band"] == []
    assert any(n.startswith("no runs") for n in idx["notes"])
    assert "no perturbation run" in idx["variants_note"] and "--birds none" in idx["birds_note"]
    clip = payload.clip_payload(ex, 0)
    assert clip["runs"] == [] and clip["birds"] is None and "no perturbation run" in clip["variants_note"]


def test_unreadable_inputs_are_notes_not_crashes(outputs, tmp_path):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(outputs, root)
    (root / "build" / "runs" / "beta" / "scores_paper.csv").write_text("what,is,this\n1,2,3\n")
    (root / "build" / "runs" / "alpha" / "predictions.jsonl").write_text("{not json\n{}\n")
    (root / "build" / "curation" / "birds.csv").write_bytes(b"\x00\x01")
    ex = load(paths(root))
    notes = {r.name: r.result.notes for r in ex.runs}
    assert any("not a score table" in n and "sample_id" in n for n in notes["beta"])
    assert any(n.startswith("predictions unreadable") and "line 1" in n for n in notes["alpha"])
    assert ex.birds is None and ex.birds_note
    payload.clip_payload(ex, 0)  # still renders


def test_a_manifest_is_required(tmp_path):
    with pytest.raises(AglError, match="manifest not found"):
        load(ExplorePaths(manifest=tmp_path / "missing.csv"))


def test_spectrogram_is_a_png_of_the_clip(outputs):
    png = spectrogram_png(outputs / "data" / "audio" / "k0" / "k0.mp3")
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert height == 96 and 40 <= width <= 800  # 4 s: one column per 64 ms frame
    idat = png[png.index(b"IDAT") + 4:png.index(b"IEND") - 8]
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + 3 * width)[:, 1:]
    brightness = rows.reshape(height, width, 3).sum(axis=2).mean(axis=1)
    # k0 is a 300 Hz tone: its band (log rows from 40 Hz to 8 kHz, high at the top) is the
    # brightest row of the picture.
    row_300 = height - 1 - int(np.log(300 / 40) / np.log(8000 / 40) * height)
    assert abs(int(np.argmax(brightness)) - row_300) <= 2


def test_spectrogram_of_a_broken_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.mp3"
    bad.write_bytes(b"not audio at all" * 10)
    with pytest.raises(AglError, match="bad.mp3: cannot decode"):
        spectrogram_png(bad)


def test_export_writes_the_served_files_and_replaces_only_its_own(explorer, tmp_path):
    out = tmp_path / "site"
    done = export(explorer, out, jobs=1)
    # 3 originals (k2 missing) and k0 under two interventions (k1's derived audio missing)
    assert done["audio_files"] == 5 and done["spectrograms"] == 5
    for rel in ("index.html", "static/app.js", "static/explore.css", "data/index.js", "data/text.js",
                "data/map.js", "data/clips/3.js", "media/0/original.mp3",
                "media/0/mask_speech.default.mp3", "spec/0/truncate.seconds_3.png", MARKER):
        assert (out / rel).is_file(), rel
    assert not (out / "media" / "2").exists()
    assert 'src="static/app.js"' in (out / "index.html").read_text()  # relative links only
    export(explorer, out, audio=False)  # an earlier export is replaced
    assert not (out / "media").exists()
    _, clip = unwrap((out / "data" / "clips" / "0.js").read_bytes())
    assert "--audio none" in clip["audio"]["note"]
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(AglError, match="not empty and is not an earlier export"):
        export(explorer, other)
    assert (other / "notes.txt").read_text() == "keep me"


def test_export_never_writes_through_a_link_planted_at_its_work_names(explorer, tmp_path):
    """The export's partial and old folders are new names made with O_EXCL (mkdtemp): a link
    left at the names it once used (`.<out>.partial-<pid>`, `.<out>.old-<pid>`) leads nowhere."""
    import os

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "site"
    for what in ("partial", "old"):
        (tmp_path / f".site.{what}-{os.getpid()}").symlink_to(elsewhere, target_is_directory=True)
    export(explorer, out, jobs=1, spectrograms=False)
    export(explorer, out, jobs=1, spectrograms=False)  # replaces the first: the `old` path
    assert list(elsewhere.iterdir()) == []
    assert (out / MARKER).is_file() and (out / "index.html").is_file()
    assert oct(out.stat().st_mode & 0o777) != oct(0o700)  # not mkdtemp's private mode
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".site."))
    assert leftovers == [f".site.old-{os.getpid()}", f".site.partial-{os.getpid()}"]  # the links only


def test_export_notes_pictures_not_drawn(explorer, tmp_path):
    export(explorer, tmp_path / "site", spectrograms=False)
    _, clip = unwrap((tmp_path / "site" / "data" / "clips" / "0.js").read_bytes())
    assert clip["audio"]["spectrogram"] is None and "--no-spectrograms" in clip["audio"]["spectrogram_note"]


def test_report_links_name_the_rows_clips():
    from agl.report.tables import explore_href as _explore_href

    base = "../explore/index.html"
    assert _explore_href(base, "knn", "country", "Spain") == "../explore/index.html#country=Spain&sort=run%3Aknn"
    assert _explore_href(base, "paper/q", "category (non-speech)", "animal").endswith(
        "#speech=no&cat=animal&sort=run%3Apaper%2Fq")
    assert _explore_href(base, "knn", "speech", "non-speech").endswith("#speech=no&sort=run%3Aknn")
    assert _explore_href(base, "knn", "country", "other (3 countries < 10 clips)") is None
    assert _explore_href(base, "knn", "status", "ok") is None
    assert _explore_href("", "knn", "country", "Spain") is None


def test_aliases_find_the_manifests_names():
    import pandas as pd

    m = pd.DataFrame({"country": ["Türkiye", "Korea, Republic of"], "continent": ["Asia", "Asia"]})
    a = payload.aliases(m, "paper")
    assert a["country"]["turkey"] == "Türkiye" and a["country"]["korea, republic of"] == "Korea, Republic of"
    assert payload.aliases(m, "strict")["country"]["tur"] == "Türkiye"


def _agl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agl.cli", "explore", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_command_errors_are_one_line(outputs, tmp_path):
    for args, expect in [
        (["--manifest", str(tmp_path / "nope.csv"), "--export", str(tmp_path / "x")], "manifest not found"),
        (["--port", "70000"], "--port 70000"),
        (["--wrong-km", "-1"], "--wrong-km -1"),
        (["--jobs", "0", "--export", str(tmp_path / "x")], "--jobs 0"),
    ]:
        r = _agl(*args, cwd=outputs)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("agl explore: error:") and expect in lines[0], r.stderr
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("")
    r = _agl("--export", str(tmp_path / "busy"), cwd=outputs)
    assert r.returncode == 2 and "not an earlier export" in r.stderr


def test_command_exports_with_notes(outputs, tmp_path):
    r = _agl("--export", str(tmp_path / "site"), "--no-spectrograms", cwd=outputs)
    assert r.returncode == 0, r.stderr
    assert "4 clips, 5 audio file(s)" in r.stdout and "file://" in r.stdout
    assert "agl explore: note: " not in r.stderr  # every optional part is here but speech
    _, idx = unwrap((tmp_path / "site" / "data" / "index.js").read_bytes())
    assert idx["protocol"] == "paper" and idx["wrong_km"] == 750.0


def test_a_cut_or_short_score_table_is_never_shown_as_whole(outputs, tmp_path):
    """A scores file cut mid-row is refused with its count; one missing whole rows says how
    many clips have scores (issue 35: nothing shown as whole that is not)."""
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(outputs, root)
    alpha = root / "build" / "runs" / "alpha" / "scores_paper.csv"
    whole = alpha.read_bytes()
    alpha.write_bytes(whole[: whole.rindex(b"\n", 0, len(whole) - 1) + 8])  # mid-row
    notes = {r.name: r.result for r in load(paths(root)).runs}
    assert notes["alpha"].scores is None
    assert any("ends mid-row" in n and "complete row(s)" in n for n in notes["alpha"].notes), \
        notes["alpha"].notes
    lines = whole.decode().splitlines(keepends=True)
    alpha.write_text("".join(lines[:-2]))  # two whole rows gone
    result = next(r.result for r in load(paths(root)).runs if r.name == "alpha")
    assert any(n.startswith("2 of 4 clips have scores") for n in result.notes), result.notes


def test_export_into_a_path_under_a_file_is_one_line(explorer, tmp_path):
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(AglError) as err:
        export(explorer, tmp_path / "a-file" / "site")
    assert "\n" not in str(err.value) and "a-file" in str(err.value), str(err.value)
