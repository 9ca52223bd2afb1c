"""The paper's published artefacts: its prediction files, its manifest and its leaderboard.

Everything is fetched from pinned public URLs (a commit of the authors' repository), or from
a mirror given as `base_url` (an http(s) or file URL, or a local folder), and cached by URL.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from pathlib import Path

import pandas as pd

from agl.core.checks import sha256_value
from agl.dataset import remote_file
from agl.dataset.manifest import content_hash
from agl.errors import AglError
from agl.http.client import Limits, Refused, looks_like_html, stream_to_file

USER_AGENT = "agl/0.1 (AGL1K benchmark reproduction; +https://github.com/)"


def resolve(base_url: str, relpath: str) -> str:
    """`relpath` under `base_url`: a URL, or a local folder given as a path (as a file:// URL)."""
    if "://" not in base_url:  # a local folder
        return (Path(base_url) / relpath).resolve().as_uri()
    return base_url.rstrip("/") + "/" + relpath.lstrip("/")


def cache_path(url: str, cache_dir: str | Path) -> Path:
    """Where `fetch` keeps `url`: one folder per URL hash, the file's own name inside."""
    name = Path(urllib.parse.urlparse(url).path).name or "file"
    return Path(cache_dir) / hashlib.sha256(url.encode()).hexdigest()[:16] / name


def fetch(url: str, cache_dir: str | Path, *, timeout: float = 60.0,
          sha256: str | None = None, limits: Limits | None = None,
          url_from: str = "paper.base_url in params.yaml",
          sha256_from: str = "the pinned SHA-256") -> Path:
    """The file at `url`, cached under `cache_dir` by a hash of the URL.

    With `sha256`, the download must match it before it enters the cache (a mismatch is an
    error and nothing is kept), and a cached copy is checked again on every use, so a file
    changed on disk is never read as the pinned one.

    The read is bounded by `limits` (default: `timeout` per read and `agl.http.client.Limits`'
    deadline and size cap; `paper.*` in params.yaml) and streamed to disk; a reply enters
    the cache only as a 200 that passes `remote_file.content_problem` (not an HTML error
    page, parses as its extension says). A cached copy that is an HTML page (cached by an
    older agl) is fetched again.

    The messages say where to look, because the same fetch serves the command line and the
    stages: `url_from` says where the URL was given ("given on the command line", "paper.base_url
    in params.yaml"), `sha256_from` where the expected checksum was (`--sha256`, a pin). A
    checksum given on the command line that does not match is the value's fault, never the
    cache's; a pinned one that a cached copy no longer matches is the copy's (delete it)."""
    name = Path(urllib.parse.urlparse(url).path).name or "file"
    dest = cache_path(url, cache_dir)
    want = sha256_value(sha256, sha256_from) if sha256 else None
    if dest.exists() and _cached_error_page(dest, name):
        dest.unlink()
    if dest.exists():
        if want:
            got = content_hash(dest)
            if got != want:
                raise AglError(_mismatch(url, got, want, sha256_from, cached=dest))
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    got, ctype = _read(url, tmp, limits, timeout, url_from)
    if want and got != want:
        tmp.unlink()
        raise AglError(_mismatch(url, got, want, sha256_from))
    problem = remote_file.content_problem(tmp, name, ctype)
    if problem:
        tmp.unlink()
        raise AglError(f"{url}: {problem}; nothing cached, rerun once the server is back")
    tmp.replace(dest)
    return dest


def _read(url: str, tmp: Path, limits: Limits | None, timeout: float,
          url_from: str) -> tuple[str, str | None]:
    """`url` into `tmp`, bounded; (SHA-256, content type). Raises AglError (one line)."""
    limits = limits or Limits(timeout_s=timeout, param="paper")
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        src = Path(urllib.parse.unquote(parsed.path))
        if not src.exists():
            raise AglError(f"{url}: file not found; check {_where(url_from)}")
        try:
            return remote_file.copy_local(src, tmp, limits.max_bytes), None
        except Refused as exc:
            raise AglError(f"{url}: {exc} ({limits.name('max_bytes')})") from None
    import httpx

    try:
        r = stream_to_file(url, tmp, limits, {"User-Agent": USER_AGENT})
    except Refused as exc:
        raise AglError(f"{url}: {exc}; nothing cached") from None
    except httpx.HTTPError as exc:
        raise AglError(f"{url}: cannot fetch ({type(exc).__name__}: {exc}); check the "
                       f"network, or {_where(url_from)}{_offline_hint(url_from)}") from None
    if r.status_code != 200:
        raise AglError(f"{url}: HTTP {r.status_code}; check {_where(url_from)}")
    return r.sha256, r.content_type


def _cached_error_page(path: Path, name: str) -> bool:
    if Path(name).suffix.lower() in (".html", ".htm"):
        return False
    with open(path, "rb") as fh:
        return looks_like_html(fh.read(512))


def _offline_hint(url_from: str) -> str:
    """How to go on without the network: a local copy in the same layout, still checked."""
    if url_from.startswith("given"):
        return " (or pass the path of a local copy instead of the URL)"
    return ("; offline, set it to a local folder holding the same layout (a checkout of the "
            "authors' repository at that commit, or just that file at that path under the "
            "folder): a pinned SHA-256 is still checked (docs/paper.md, Offline)")


def _where(url_from: str) -> str:
    """ "given on the command line" -> "the URL given on the command line"; a params key as is."""
    return f"the URL {url_from}" if url_from.startswith("given") else url_from


def _mismatch(url: str, got: str, want: str, sha256_from: str, *, cached: Path | None = None) -> str:
    """A checksum mismatch, blamed on what is likely wrong: a value the user typed, or (for a
    pinned checksum) the file, which a mirror changed or a disk damaged."""
    what = f"the cached copy {cached} of {url}" if cached else url
    if sha256_from.startswith("--"):
        return (f"{what} has SHA-256 {got}, not the {sha256_from} {want} you gave; check the "
                f"value (or leave {sha256_from} out to read the file unchecked)"
                + ("" if cached is None else "; nothing was downloaded again"))
    if cached is not None:
        return (f"{what} has SHA-256 {got}, not {want} ({sha256_from}): it changed on disk; "
                f"`rm {cached}` and rerun to download it again")
    return (f"{what} has SHA-256 {got}, not {want} ({sha256_from}): the file differs from the "
            "pinned one (nothing cached); check that the URL serves the pinned file")


_ROW = re.compile(r"^\|(.+)\|\s*$")


def read_paper_leaderboard(path: str | Path) -> pd.DataFrame:
    """The paper's reported values: a CSV (model, source, distance_error_km, continent_acc,
    country_acc, city_acc) or the authors' README, whose markdown tables hold the same."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".csv":
        frame = pd.read_csv(path)
        need = {"model", "distance_error_km", "continent_acc", "country_acc", "city_acc"}
        if not need <= set(frame.columns):
            raise AglError(f"{path}: needs columns {', '.join(sorted(need))}")
        return frame
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line.strip())
        if not m:
            continue
        cells = [c.strip().strip("*").strip() for c in m.group(1).split("|")]
        if not cells or set("".join(cells)) <= set("-: "):
            continue
        model = re.sub(r"^[^\w]+", "", cells[0]).strip()  # drop medal emoji
        nums = []
        for c in cells[1:]:
            try:
                nums.append(float(c.replace("*", "")))
            except ValueError:
                nums = []
                break
        if model and nums:
            rows.append({"model": model, "distance_error_km": nums[0],
                         **dict(zip(("continent_acc", "country_acc", "city_acc"), nums[1:],
                                    strict=False))})
    if not rows:
        raise AglError(f"{path}: no leaderboard table found")
    return pd.DataFrame(rows)


def run_source(item: dict, published: dict) -> tuple[str, str]:
    """A `paper.runs` entry's name and path in the authors' repository: its own `path`, or
    the pinned one of `published: <short name>` (whose SHA-256 is then checked)."""
    if not isinstance(item, dict):
        raise AglError(f"params.yaml paper.runs: {item!r} is not a run; each entry is "
                       "{published: <a key of paper.published>} or {name: ..., path: ...}")
    short = item.get("published")
    if short is not None:
        if short not in published:
            raise AglError(f"params.yaml paper.runs: published '{short}' is not a key of "
                           f"paper.published ({', '.join(sorted(published)) or 'none'})")
        return str(item.get("name") or short), str(published[short]["path"])
    if not item.get("path") or not item.get("name"):
        raise AglError(f"params.yaml paper.runs: {item!r} needs a name and a path, or "
                       "published: <a key of paper.published>")
    return str(item["name"]), str(item["path"])
