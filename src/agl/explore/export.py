"""`agl explore --export DIR`: the explorer as a folder of static files.

The folder holds exactly what the server would serve, under the same relative paths
(index.html, static/, data/*.js, data/clips/<n>.js, media/<n>/<name>, spec/<n>/<stem>.png),
so the page opens from disk (`file://`) or from any static host, and fetches nothing from
the network. Audio is copied (a hard link where the file system allows) unless `audio` is
off; spectrograms are drawn in `jobs` processes. A clip whose audio is missing, or whose
picture cannot be drawn, says so on its page.

The folder is written beside its destination and swapped in at the end, so an interrupted
export leaves the previous one intact. An existing destination is replaced only if it is an
earlier export (it holds MARKER); any other non-empty folder is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from agl.core import diskwrite
from agl.core.worldmap import world_svg
from agl.errors import AglError
from agl.explore import payload
from agl.explore.sources import Explorer
from agl.explore.spectrogram import spectrogram_png
from agl.game.page import load_static

MARKER = ".agl-explore"


def _picture(task: tuple[int, str, str]) -> tuple[int, str, bytes | None, str | None]:
    n, stem, path = task
    try:
        return n, stem, spectrogram_png(Path(path)), None
    except AglError as exc:
        return n, stem, None, str(exc)
    except Exception as exc:  # one undecodable file must not end an hour-long export
        return n, stem, None, f"{type(exc).__name__}: {str(exc)[:120]}"


def _check_destination(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise AglError(f"--export {out}: is a file; give a folder")
    for parent in out.absolute().parents:  # the first that exists must be a folder we can write
        if parent.exists():
            if not parent.is_dir():
                raise AglError(f"--export {out}: {parent} is a file, not a folder; give a "
                               "folder path")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise AglError(f"--export {out}: cannot write in {parent}; give a folder you "
                               "can write")
            break
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise AglError(f"--export {out}: the folder is not empty and is not an earlier export "
                       f"(no {MARKER} in it); give a new or empty folder")


def _place(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _fresh_folder(out: Path, what: str) -> Path:
    """A new empty folder beside `out` under a name nobody could have planted: mkdtemp makes
    it with O_EXCL semantics, where a fixed `.<out>.partial-<pid>` name was cleared and then
    created again, following a link left at that name into another folder."""
    path = Path(tempfile.mkdtemp(prefix=f".{out.name}.{what}-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o777 & ~umask)  # mkdtemp's 0700 would become the exported folder's mode
    return path


def export(ex: Explorer, out: Path, *, audio: bool = True, spectrograms: bool = True,
           jobs: int = 2, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write the folder; returns counts (clips, audio files, pictures, problems)."""
    out = Path(out)
    _check_destination(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_folder(out, "partial")
    (tmp / "data" / "clips").mkdir(parents=True)
    (tmp / "static").mkdir()
    say = progress or (lambda _line: None)
    try:
        for name, (body, _ctype) in load_static("agl.explore").items():
            diskwrite.write_bytes((tmp if name == "index.html" else tmp / "static") / name, body)
        diskwrite.write_bytes(tmp / "data" / "index.js", payload.script("index", payload.index_payload(ex)))
        diskwrite.write_bytes(tmp / "data" / "text.js", payload.script("text", payload.text_payload(ex)))
        diskwrite.write_bytes(tmp / "data" / "map.js", payload.script("map", world_svg()))

        files = {n: {stem: p for stem, p in payload.media_files(ex, n).items() if p.is_file()}
                 for n in range(len(ex.manifest))}
        n_audio = 0
        if audio:
            for n, found in files.items():
                for stem, path in found.items():
                    _place(path, tmp / "media" / str(n) / f"{stem}{path.suffix.lower()}")
                    n_audio += 1
            say(f"{n_audio} audio file(s) placed")
        broken: dict[tuple[int, str], str] = {}
        tasks = [(n, stem, str(p)) for n, found in files.items() for stem, p in found.items()]
        n_pictures = 0
        if spectrograms and audio and tasks:
            with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
                for done, (n, stem, png, why) in enumerate(pool.map(_picture, tasks, chunksize=4), 1):
                    if png is None:
                        broken[(n, stem)] = why or "not drawn"
                    else:
                        dest = tmp / "spec" / str(n) / f"{stem}.png"
                        diskwrite.write_bytes(dest, png)
                        n_pictures += 1
                    if done % 100 == 0:
                        say(f"{done}/{len(tasks)} spectrograms")
        elif audio:
            broken = {(n, stem): "not drawn (exported with --no-spectrograms)" for n, stem, _ in tasks}
        for n in range(len(ex.manifest)):
            clip = payload.clip_payload(ex, n, audio=audio, broken=broken)
            diskwrite.write_bytes(tmp / "data" / "clips" / f"{n}.js", payload.script(f"clip:{n}", clip))
        diskwrite.write_text(tmp / MARKER, "written by agl explore --export; safe to replace\n")
        if out.exists():
            old = _fresh_folder(out, "old")
            out.rename(old)  # onto the new empty folder: Linux replaces an empty directory
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"clips": len(ex.manifest), "audio_files": n_audio, "spectrograms": n_pictures,
            "spectrogram_problems": len([w for w in broken.values() if "--no-spectrograms" not in w]),
            "folder": str(out)}
