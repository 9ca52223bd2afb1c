"""Paths that must stay inside a folder, and removal that never follows a link out.

Every file agl serves (the game's `/audio/<clip>`), prunes (`agl download` removing clips
the manifest no longer names, a derived dataset folder made again) or writes under a folder
it was given is checked here. A name from the manifest is already a plain name (no `/`, no
`..`: agl.dataset.manifest), but a *link* planted in the folder can still point anywhere: a
symlink `data/audio/<key>/<clip>.mp3 -> ~/.ssh/id_rsa` would hand the key to the browser,
and a symlinked clip folder would make a download write, or a prune delete, outside `data/`.

* `inside(root, path)` follows every link of `path` (and of `root`: a data folder that is
  itself a link to another disk is fine) and refuses, naming `path`, what ends outside.
* `remove(path)` removes a file, a link (the link only, never what it points to) or a
  folder tree; `shutil.rmtree` unlinks the links inside a tree without following them.

Choice (documented in docs/hostile-input.md): a link whose target stays inside the folder is
allowed, so is a folder that is itself a link; DVC's `cache.type: symlink` links every clip
into `.dvc/cache`, outside `data/audio`, and is refused by `agl play` (the default cache
types, reflink and copy, and hardlink have no links to follow).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

from agl.errors import AglError

_PLAIN_NAME = re.compile(r"^[^/\\\x00]+$")


def is_plain_name(name: str) -> bool:
    """True for a single path component: no separators, no `..`, not empty."""
    return bool(name) and name not in (".", "..") and bool(_PLAIN_NAME.match(name)) and (
        ".." not in name.split("/")
    )


class OutsideFolder(AglError):
    """A path that resolves outside the folder it must stay in."""


def inside(root: str | Path, path: str | Path,
           error: Callable[[str], Exception] = OutsideFolder) -> Path:
    """`path` with every link resolved, if that lies in `root` (resolved too); else raises
    `error(message)` (one line naming `path` and `root`). `path` need not exist yet (a file
    about to be written): its existing part is resolved, the rest kept as named."""
    try:
        base = Path(root).resolve()
        real = Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # a link loop: RuntimeError before Python 3.13
        raise error(f"{path}: cannot be resolved ({exc}); remove the broken link") from None
    if real != base and not real.is_relative_to(base):
        raise error(f"{path}: leads outside {root} (a link); refused: replace the link with "
                    "the file itself")
    return real


def remove(path: str | Path) -> None:
    """Remove a file, a link or a folder tree without ever following a link out of it."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)
