"""After `agl download`: put `data/` in DVC's cache when it is exactly what `data.dvc` pins.

`data.dvc` pins the dataset folder; `agl download` fills it outside DVC (DVC refuses a path
that is both a stage output and pinned by a .dvc file). Until the bytes are in DVC's cache,
DVC calls the pin "changed" ("not in cache"), so the next `dvc repro` re-saves `data.dvc`,
unchanged, and then tells the user to `git add data.dvc` as if it had moved. Caching the
folder here when its hash equals the pin's makes `dvc repro` skip the pin (and lets `dvc
push` send the data right away). A folder that differs from the pin (another dataset, a new
generator) is left alone: `dvc repro` re-pins it, and then `data.dvc` has really changed.
"""

from __future__ import annotations

from pathlib import Path

from agl.core.dvc_busy import dvc_lock_is_one_line

PIN = "data.dvc"


def cache_if_pinned(folder: str | Path, root: str | Path = ".", pin: str = PIN) -> str | None:
    """Cache `folder` when it is what `pin` pins and matches it; a line saying what was done
    (None when `root` is no DVC repository with that pin, or the pin names another folder)."""
    root = Path(root)
    if not (root / pin).is_file() or not (root / ".dvc").is_dir():
        return None
    from dvc.repo import Repo

    with dvc_lock_is_one_line(root, "agl download"), Repo(str(root)) as repo, repo.lock:
        (stage,) = repo.stage.collect(str((root / pin).resolve()))
        pinned = {str(o.def_path): o.hash_info for o in stage.outs}
        if [(root / p).resolve() for p in pinned] != [Path(folder).resolve()]:
            return None
        stage.save()  # hashes the folder on disk (DVC keeps the hashes it computed)
        now = {str(o.def_path): o.hash_info for o in stage.outs}
        paths = ", ".join(f"{p}/" for p in now)
        if now != pinned:
            return (f"{paths} differs from {pin} (another dataset or generator): `dvc repro` "
                    f"re-pins it; commit {pin} with the results")
        stage.commit()
    return f"{paths} matches {pin}; stored in DVC's cache (`dvc push` can send it)"
