"""What an audio file carries beside its sound (agl.core.container) and the audit of it
(agl.dataset.tag_audit): tags removed without re-encoding, and the real clips' give-aways."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile as sf

from agl.core.container import ContainerError, strip, tags_of
from agl.dataset import demo


def _decoded(data: bytes) -> np.ndarray:
    return sf.read(io.BytesIO(data), dtype="float32", always_2d=True)[0]


def test_real_archive_mp3s_lose_every_tag_and_keep_every_frame(real_mp3s):
    assert len(real_mp3s) == 2
    for path in real_mp3s:
        data = path.read_bytes()
        kinds = {t.kind for t in tags_of(data)}
        assert {"ID3v2.3", "ID3v1"} <= kinds, path.name
        out = strip(data, ".mp3")
        # A slice: every MPEG frame byte-identical, only the tags before and after gone.
        start = data.index(out)
        assert data[start:start + len(out)] == out and start > 0 and len(out) < len(data) - start
        assert out[:3] != b"ID3" and out[-128:-125] != b"TAG" and b"APETAGEX" not in out[-64:]
        assert out[:2] == b"\xff\xfb" or out[0] == 0xFF  # an MPEG frame sync first
        assert tags_of(out) == []
        assert np.array_equal(_decoded(out), _decoded(data)), path.name
        for word in (b"Essaouira", b"Morocco", b"Berlin", b"Johannsen", b"31.516"):
            assert word not in out


def test_planted_demo_tags_come_off_to_the_very_bytes_the_encoder_wrote():
    for how, fields in demo.PLANTED_TAGS.values():
        untagged = demo._encode(np.zeros(8000))
        tagged = demo.plant_tags(untagged, how, fields)
        assert tagged != untagged and tags_of(tagged)
        assert strip(tagged, ".mp3") == untagged, how
    # Both tags at once, APEv2 before an ID3v1 trailer and an ID3v2 in front.
    raw = demo._encode(np.zeros(8000))
    both = demo.plant_tags(demo.plant_tags(raw, "apev2", (("Title", "Lisbon"),)), "id3v2.3+id3v1",
                           (("TIT2", "Lisbon"),))
    assert {t.kind for t in tags_of(both)} >= {"ID3v2.3", "ID3v1", "APEv2"}
    assert strip(both, ".mp3") == raw


def _wav_with_info(tmp_path) -> tuple[bytes, bytes]:
    pcm = (np.sin(np.arange(4000) / 9) * 8000).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, 8000, format="WAV", subtype="PCM_16")
    plain = buf.getvalue()
    info = b"INFO" + b"INAM" + struct.pack("<I", 12) + b"Essaouira\0\0\0" \
        + b"ICMT" + struct.pack("<I", 9) + b"Morocco!\0" + b"\0"
    chunk = b"LIST" + struct.pack("<I", len(info) - 1) + info
    body = plain[12:] + chunk
    return plain, b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


def test_wav_loses_its_riff_info_and_keeps_its_samples(tmp_path):
    plain, tagged = _wav_with_info(tmp_path)
    assert {t.key for t in tags_of(tagged)} >= {"INAM", "ICMT"}
    out = strip(tagged, ".wav")
    assert b"LIST" not in out and b"Essaouira" not in out and tags_of(out) == []
    assert out[out.index(b"data"):] == plain[plain.index(b"data"):]
    assert np.array_equal(_decoded(out), _decoded(tagged))


@pytest.mark.parametrize("fmt,suffix", [("FLAC", ".flac"), ("OGG", ".ogg")])
def test_flac_and_ogg_lose_their_comments(tmp_path, fmt, suffix):
    import mutagen

    path = tmp_path / f"clip{suffix}"
    sf.write(path, (np.sin(np.arange(16000) / 7) * 0.3).astype(np.float32), 16000, format=fmt)
    f = mutagen.File(path)
    f["title"] = "Rue Mellah, Essaouira"
    f["comment"] = "31.516/-9.766"
    f.save()
    data = path.read_bytes()
    assert any("Essaouira" in t.text for t in tags_of(data))
    out = strip(data, suffix)
    assert b"Essaouira" not in out and b"31.516" not in out
    assert not any(t.text for t in tags_of(out))
    assert np.array_equal(_decoded(out), _decoded(data))


def test_a_container_it_cannot_strip_is_refused_in_one_line():
    with pytest.raises(ContainerError, match=r"'\.aiff'.*convert it"):
        strip(b"FORM....AIFF", ".aiff")
    with pytest.raises(ContainerError, match="RIFF/WAVE"):
        strip(b"not a wav at all", ".wav")


def test_the_audit_names_both_real_clips_with_the_tag_and_the_words(agl1k_manifest, archive_dir):
    from agl.dataset.manifest import clips, load_manifest
    from agl.dataset.tag_audit import audit, summary_line

    with pytest.warns(UserWarning):
        rows = audit(clips(load_manifest(agl1k_manifest)), archive_dir)
    by_key = {r.key: r for r in rows}
    assert set(by_key) == {"aporee_26839_30948", "aporee_5201_6631"}
    essaouira = {str(f) for f in by_key["aporee_26839_30948"].findings}
    assert "city in ID3v2.3 COMM::eng: 'essaouira'" in essaouira
    assert "country in ID3v2.3 COMM::eng: 'morocco'" in essaouira
    assert any(s.startswith("coordinates in ID3v2.3 COMM::eng: '31.51633429397/-9.766309261322")
               for s in essaouira)
    assert "date in ID3v2.3 COMM::eng: '2002-02-07'" in essaouira
    assert "city in file name: 'essaouira'" in essaouira
    berlin = {str(f) for f in by_key["aporee_5201_6631"].findings}
    assert "city in ID3v2.3 TIT2: 'berlin'" in berlin  # the manifest says "Berlin Treptow"
    assert summary_line(rows).startswith("2 of 2 clips carry their place in their tags; 1 in "
                                         "their file name")


def test_file_names_are_read_as_words_run_together():
    from agl.dataset.manifest import Clip
    from agl.dataset.tag_audit import find_places, name_words

    def places(name: str, city: str, country: str = "United Kingdom") -> set[str]:
        clip = Clip("k", name, 0.0, 0.0, 1.0, city, country, "Europe")
        return {f.what for f in find_places(clip, name_words(name[:-4]), "file name", glued=True)}

    assert places("PrestonStation.mp3", "Preston") == {"city"}
    assert places("messinaStation091024.mp3", "Messina", "Italy") == {"city"}
    assert places("norwichmarket.mp3", "Norwich") == {"city"}
    assert places("refrathlustheide.mp3", "Rath", "Germany") == set()  # not at a word's start
    assert places("SanJoseduskbirds.mp3", "San Jose", "Costa Rica") == {"city"}


def test_the_tags_and_untagged_interventions_copy_the_file_not_its_samples(tmp_path):
    """`tags`: each clip's file as published (the listen run then sends it with its tags);
    `untagged`: the same file without them, not re-encoded."""
    import pandas as pd

    from agl.counterfactual.effects import derive_dataset
    from agl.counterfactual.perturb import parse_perturb
    from agl.dataset.manifest import CATEGORY_COLUMNS, write_manifest
    from agl.inference.params_run import tags_intervention

    raw = demo._encode(np.sin(np.arange(16000) / 9) * 0.2)
    tagged = demo.plant_tags(raw, "id3v2.3+id3v1", (("TIT2", "Rue Mellah, Essaouira"),))
    data = tmp_path / "data"
    (data / "audio" / "k").mkdir(parents=True)
    (data / "audio" / "k" / "EssaouiraMuezzin.mp3").write_bytes(tagged)
    write_manifest(pd.DataFrame([{"key": "k", "mp3name": "EssaouiraMuezzin.mp3", "mp3seconds": 1.0,
                                  "city": "Essaouira", "country": "Morocco", "continent": "Africa",
                                  "latitude": 31.5, "longitude": -9.77,
                                  **{c: 1.0 for c in CATEGORY_COLUMNS}}]), data / "manifest.csv")
    for kind, expect in (("tags", tagged), ("untagged", raw)):
        out = tmp_path / kind
        summary = derive_dataset(data, out, parse_perturb({kind: {"kind": kind}})[kind])
        assert summary["format"] == "as-published"
        assert (out / "default" / "audio" / "k" / "EssaouiraMuezzin.mp3").read_bytes() == expect
        assert tags_intervention(out / "default") is (kind == "tags")
    assert not tags_intervention(data)
