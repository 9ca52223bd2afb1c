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

from agl.core.diskwrite import write_bytes
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
            committed = _committed_pin(root, pin)
            if committed is None or {p: h.value for p, h in now.items()} != committed:
                return (f"{paths} differs from {pin} (another dataset or generator): `dvc repro` "
                        f"re-pins it; commit {pin} with the results")
            # The folder is the committed data again (a clip deleted, then restored): the
            # `dvc repro` that ran while it was missing had re-pinned the smaller folder. The
            # committed pin is put back, so DVC neither re-pins nor asks to `git add` it.
            _restore_pin(root, pin)
            (stage,) = repo.stage.collect(str((root / pin).resolve()))
            stage.save()
            stage.commit()
            return (f"{paths} holds again what {pin} pins as committed (restored clips); {pin} "
                    "had been re-pinned by a `dvc repro` while they were missing and is set back "
                    "to the committed pin, unchanged for git; stored in DVC's cache")
        stage.commit()
    return f"{paths} matches {pin}; stored in DVC's cache (`dvc push` can send it)"


def _git_show(root: Path, pin: str) -> bytes | None:
    import subprocess

    try:
        done = subprocess.run(["git", "show", f"HEAD:./{pin}"], cwd=root, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _committed_pin(root: Path, pin: str) -> dict[str, str] | None:
    """{path: md5} of the pin as the last commit holds it (None: no git, or not committed)."""
    import yaml

    text = _git_show(root, pin)
    try:
        doc = yaml.safe_load(text) if text is not None else None
    except yaml.YAMLError:
        return None
    outs = doc.get("outs") if isinstance(doc, dict) else None
    if not isinstance(outs, list):
        return None
    return {str(o.get("path")): str(o.get("md5")) for o in outs if isinstance(o, dict)}


def _restore_pin(root: Path, pin: str) -> None:
    text = _git_show(root, pin)
    if text is not None:
        write_bytes(root / pin, text)
