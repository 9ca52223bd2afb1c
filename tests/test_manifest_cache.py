"""The validated-manifest cache: same bytes are validated once, other bytes or other code
never read a stale entry, a torn entry is rewritten, the repaired header still warns."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest

from agl.dataset import manifest_cache
from agl.dataset.manifest import ManifestWarning, load_manifest


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AGL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "manifests"


def _load(path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ManifestWarning)
        frame = manifest_cache.load_manifest_cached(path, **kw)
    return frame, [str(w.message) for w in caught if issubclass(w.category, ManifestWarning)]


def test_second_load_comes_from_the_cache_and_equals_the_validated_table(cache_dir, agl1k_manifest, monkeypatch):
    first, warned_first = _load(agl1k_manifest)
    assert len(list(cache_dir.glob("*.arrow"))) == 1 and not list(cache_dir.glob("*.tmp"))
    calls = []
    monkeypatch.setattr(manifest_cache, "load_manifest", lambda *a, **k: calls.append(a))
    again, warned_again = _load(agl1k_manifest)
    assert calls == []  # not validated again
    pd.testing.assert_frame_equal(again, first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        pd.testing.assert_frame_equal(again, load_manifest(agl1k_manifest))
    assert warned_first == warned_again and "split 'channel_environment_and_background'" in warned_again[0]
    subset, _ = _load(agl1k_manifest, columns=["title"])
    assert "title" in subset and "description" not in subset and "key" in subset


def test_other_bytes_or_code_give_another_entry_and_a_torn_entry_is_rewritten(
    cache_dir, agl1k_manifest, tmp_path, monkeypatch
):
    _load(agl1k_manifest)
    (entry,) = cache_dir.glob("*.arrow")
    entry.write_bytes(b"torn")
    frame, _ = _load(agl1k_manifest)
    assert len(frame) == 1444 and entry.stat().st_size > 1000
    edited = tmp_path / "m.csv"
    edited.write_bytes(agl1k_manifest.read_bytes().replace(b"Essaouira", b"Mogador", 1))
    _load(edited)
    assert len(list(cache_dir.glob("*.arrow"))) == 2
    manifest_cache.code_version.cache_clear()
    monkeypatch.setattr(manifest_cache, "__file__", str(edited))  # as if the loader's code changed
    _load(agl1k_manifest)
    manifest_cache.code_version.cache_clear()
    assert len(list(cache_dir.glob("*.arrow"))) == 3


def test_a_bad_manifest_is_never_cached(cache_dir, tmp_path):
    from agl.errors import AglError

    bad = tmp_path / "bad.csv"
    bad.write_text("key,latitude\nx,1\n")
    with pytest.raises(AglError):
        manifest_cache.load_manifest_cached(bad)
    assert not cache_dir.exists() or not list(cache_dir.iterdir())
