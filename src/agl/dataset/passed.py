"""The clips a listening stage (tag, birds, speech) works on: the manifest's clips, less those
that failed the filter stage where the stage's `only_passed` asks for it."""

from __future__ import annotations

from pathlib import Path

from agl.dataset.manifest import clips
from agl.errors import AglError


def passed_keys(filter_csv: Path) -> list[str]:
    """Keys of the clips that passed, from a filter table, in table order."""
    import pandas as pd  # heavy: only when a filter table is read

    try:
        frame = pd.read_csv(filter_csv, dtype={"key": str}, keep_default_na=False)
    except FileNotFoundError:
        raise AglError(f"{filter_csv}: filter table not found; run the filter stage first") from None
    if "passed" not in frame or "key" not in frame:
        raise AglError(f"{filter_csv}: not a filter table (needs 'key' and 'passed' columns)")
    return [k for k, p in zip(frame["key"], frame["passed"], strict=True) if str(p) == "True"]


def clips_to_listen(manifest, audio_root: Path, filter_csv: Path,
                    only_passed: bool) -> tuple[list[tuple[str, Path]], int]:
    """(key, audio path) of every clip of the manifest frame, in manifest order, and how many
    were left out for failing the filter (only with `only_passed`)."""
    items = [(c.key, Path(audio_root) / c.relpath) for c in clips(manifest)]
    if not only_passed:
        return items, 0
    keep = set(passed_keys(filter_csv))
    return [(k, p) for k, p in items if k in keep], sum(k not in keep for k, _ in items)
