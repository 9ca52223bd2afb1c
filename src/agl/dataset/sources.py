"""Where input files come from: a local path, an http(s)/file URL, or a `paper:<name>` short name.

`agl evaluate` and `agl import` accept any of the three for the predictions and the manifest.
A URL is downloaded once into a cache (`paper.fetch`: one folder per URL hash) and read from
there afterwards, offline. Its SHA-256 is checked when one is given (`--sha256`) or pinned in
`params.yaml` (the AGL1K manifest's `download.manifest_sha256`, and `paper.published` entries);
a mismatch is refused with one line and nothing is cached.

`paper:<name>` names one of the authors' published files in their repository at the pinned
commit (`paper.base_url`, a mirror works too): the entries of `params.yaml: paper.published`
(with their checksums), `paper:manifest` (the benchmark manifest), and, unchecked, every model
of the paper's leaderboard by the folder its predictions lie in (the `published_predictions`
column of `src/agl/data/paper_values.csv`, e.g. `paper:gemini-2.5-pro`).

Without a `params.yaml` in the working directory the pinned defaults below are used, so the
commands work from any folder.
"""

from __future__ import annotations

import difflib
import urllib.parse
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from agl.core.checks import param_value, sha256_value
from agl.core.secrets import strip_url_credentials, url_credentials
from agl.dataset.manifest import content_hash
from agl.dataset.paper import resolve
from agl.errors import AglError
from agl.http.bounds import check_redirect_hosts
from agl.http.client import Limits

PAPER_TITLE = "The Sonar Moment"
AUTHORS_REPO = "https://github.com/Rising0321/AGL1K"
PINNED_COMMIT = "ab53ad0a78ec4306f2d9437aae3da6984f45403f"
PINNED_BASE_URL = f"https://raw.githubusercontent.com/Rising0321/AGL1K/{PINNED_COMMIT}"
MANIFEST_PATH = "data/geoLocalization_schema.csv"
MANIFEST_SHA256 = "4f5c09b9336b5cfe689cc76f04eb8eabb794e53763ef6d81eb150bfce08b4f3b"
DEFAULT_CACHE = "cache/sources"
PAPER_VALUES = "paper_values.csv"  # in agl/data: the paper's leaderboard, public numbers
SCHEME = "paper:"


@dataclass(frozen=True)
class Published:
    path: str  # inside the authors' repository
    sha256: str | None = None


@dataclass
class SourceConfig:
    """What resolving a source needs from params.yaml (`paper:` and `download:`)."""

    base_url: str = PINNED_BASE_URL
    manifest: str = MANIFEST_PATH
    manifest_sha256: str | None = MANIFEST_SHA256
    manifest_url: str = f"{PINNED_BASE_URL}/{MANIFEST_PATH}"
    published: dict[str, Published] = field(default_factory=dict)
    origin: str = "agl's built-in pins"  # where the values come from, for messages
    # Bounds on every fetch (params.yaml paper.timeout_s / deadline_s / max_bytes /
    # redirect_hosts; `--deadline-s` / `--max-bytes` override): see agl.http.client.
    timeout_s: float = 60.0
    deadline_s: float = 300.0
    max_bytes: int = 100_000_000
    redirect_hosts: tuple[str, ...] = ()
    min_rate_bps: float = 1024.0  # a stalled transfer ends (paper.min_rate_bps / stall_window_s)
    stall_window_s: float = 30.0

    def limits(self) -> Limits:
        """The bounds as `agl.http.client.Limits` (refusals name `paper.<key>`)."""
        return Limits(timeout_s=self.timeout_s, deadline_s=self.deadline_s,
                      max_bytes=self.max_bytes, redirect_hosts=tuple(self.redirect_hosts),
                      param="paper", min_rate_bps=self.min_rate_bps or None,
                      stall_window_s=self.stall_window_s)

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> SourceConfig:
        params = params or {}
        paper, download = params.get("paper") or {}, params.get("download") or {}
        for name, section in (("paper", paper), ("download", download)):
            if not isinstance(section, dict):
                raise AglError(f"params.yaml {name}: expected a mapping of settings, not {section!r:.60}")
        published = paper.get("published") or {}
        if not isinstance(published, dict):
            raise AglError(f"params.yaml paper.published: expected a mapping of name -> "
                           f"{{path, sha256}}, not {published!r:.60}")
        for key in ("base_url", "manifest", "manifest_url"):
            value = (download if key == "manifest_url" else paper).get(key)
            if value is not None and not isinstance(value, str):
                section = "download" if key == "manifest_url" else "paper"
                raise AglError(f"params.yaml {section}.{key}: expected a URL or path, not {value!r:.60}")
        cfg = cls(origin="params.yaml")
        cfg.base_url = str(paper.get("base_url") or cfg.base_url)
        cfg.manifest = str(paper.get("manifest") or cfg.manifest)
        cfg.manifest_url = str(download.get("manifest_url") or cfg.manifest_url)
        cfg.manifest_sha256 = download.get("manifest_sha256", cfg.manifest_sha256)
        if cfg.manifest_sha256 is not None:
            cfg.manifest_sha256 = sha256_value(cfg.manifest_sha256,
                                               "params.yaml download.manifest_sha256")
        _read_bounds(cfg, paper)
        for name, entry in published.items():
            if not isinstance(entry, dict) or not entry.get("path"):
                raise AglError(f"params.yaml paper.published.{name}: needs a 'path' (and optionally 'sha256')")
            sha = entry.get("sha256")
            if sha is not None:
                sha = sha256_value(sha, f"params.yaml paper.published.{name}.sha256")
            cfg.published[str(name)] = Published(str(entry["path"]), sha)
        return cfg

    def pin_name(self, short: str) -> str:
        """Where the checksum of `paper:<short>` is written, for messages."""
        key = ("download.manifest_sha256" if short == "manifest"
               else f"paper.published.{short}.sha256")
        return f"{key} in {self.origin}"

    @classmethod
    def load(cls, params_path: str | Path = "params.yaml") -> SourceConfig:
        """From `params_path` when it exists (a checkout), else the pinned defaults."""
        path = Path(params_path)
        if not path.exists():
            return cls()
        from agl.core.yamlfile import load_yaml  # the one reader of configuration YAML

        return cls.from_params(load_yaml(path))

    def names(self) -> dict[str, Published]:
        """Every short name: params entries win over the leaderboard's folder names."""
        out = {"manifest": Published(self.manifest, self.manifest_sha256)}
        for rel in paper_values()["published_predictions"].dropna():
            out.setdefault(Path(str(rel)).parent.name, Published(str(rel)))
        out.update(self.published)
        return out

    def pinned(self) -> dict[str, str]:
        """URL -> SHA-256 of every file whose content is pinned."""

        pins = {}
        if self.manifest_sha256:
            pins[self.manifest_url] = self.manifest_sha256
            pins[resolve(self.base_url, self.manifest)] = self.manifest_sha256
            pins[f"{PINNED_BASE_URL}/{MANIFEST_PATH}"] = self.manifest_sha256
        for entry in self.published.values():
            if entry.sha256:
                pins[resolve(self.base_url, entry.path)] = entry.sha256
                pins[f"{PINNED_BASE_URL}/{entry.path}"] = entry.sha256
        return pins


def _read_bounds(cfg: SourceConfig, paper: dict[str, Any]) -> None:
    for key in ("timeout_s", "deadline_s", "max_bytes", "min_rate_bps", "stall_window_s"):
        value = paper.get(key)
        if value is None:
            continue
        setattr(cfg, key, param_value(f"paper.{key}", value))  # the one table (agl.core.checks.PARAMS)
    cfg.redirect_hosts = check_redirect_hosts(paper.get("redirect_hosts"), "params.yaml paper.redirect_hosts")


def paper_values():
    """The paper's leaderboard as shipped in this package (`agl/data/paper_values.csv`)."""
    import pandas as pd

    with resources.as_file(resources.files("agl") / "data" / PAPER_VALUES) as path:
        return pd.read_csv(path)


def paper_values_path() -> Path:
    return Path(str(resources.files("agl") / "data" / PAPER_VALUES))


def is_url(spec: str) -> bool:
    """Whether `spec` is an http(s) or file URL (fetched into the cache), not a path."""
    return urllib.parse.urlparse(str(spec)).scheme in ("http", "https", "file")


def resolve_source(
    spec: str | Path,
    *,
    cache_dir: str | Path = DEFAULT_CACHE,
    sha256: str | None = None,
    config: SourceConfig | None = None,
    sha256_from: str = "--sha256",
) -> Path:
    """A local path for `spec`: a path as is; a URL or `paper:<name>` fetched into the cache.

    `sha256` is the caller's expected checksum, named `sha256_from` in messages (the command
    line's `--sha256` or `--manifest-sha256`); without it a pinned one applies. A URL is the
    command line's, so a 404 says to check it; `paper:<name>` points at `paper.base_url`.
    Never passes a URL through `Path` (which would merge `https://` into `https:/`)."""
    text = str(spec)
    if sha256 is not None:
        sha256 = sha256_value(sha256, sha256_from)
    if not text.startswith(SCHEME) and not is_url(text):
        path = Path(text)
        if sha256:
            _check_local(path, sha256, sha256_from)
        return path
    from agl.dataset.paper import fetch, resolve  # pandas, httpx: only when something is fetched

    config = config or SourceConfig.load()
    url_from = "given on the command line"
    if text.startswith(SCHEME):
        name, entry = _paper_entry(text, config)
        url = resolve(config.base_url, entry.path)
        url_from = f"paper.base_url in {config.origin} ({text} is {entry.path} under it)"
        if not sha256 and entry.sha256:
            sha256, sha256_from = entry.sha256, config.pin_name(name)
    else:
        url = text
    if url_credentials(url):  # as infer refuses them: a published file needs no key
        raise AglError(f"{strip_url_credentials(url)}: the URL carries a credential "
                       f"(user:password@ or a key in its query), from {url_from}; a published "
                       "file needs none: give a URL without it, or a local copy")
    if not sha256 and url in config.pinned():
        sha256, sha256_from = config.pinned()[url], f"the pinned SHA-256 of {url} ({config.origin})"
    return fetch(url, cache_dir, sha256=sha256, limits=config.limits(), url_from=url_from,
                 sha256_from=sha256_from)


def _paper_entry(text: str, config: SourceConfig) -> tuple[str, Published]:
    """`paper:<name>`'s name and entry; an unknown name is one line with the closest one."""
    name = text[len(SCHEME) :]
    names = config.names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean 'paper:{close[0]}'? " if close else ""
        raise AglError(
            f"{text}: unknown published file; {hint}known: " + ", ".join(f"paper:{n}" for n in sorted(names))
        )
    return name, names[name]


def source_url(spec: str, *, cache_dir: str | Path = DEFAULT_CACHE,
               config: SourceConfig | None = None) -> tuple[str, Path]:
    """(the URL a URL or `paper:<name>` is fetched from, where its cached copy lies or will),
    fetching nothing: what a dry run can say offline."""
    from agl.dataset.paper import cache_path, resolve  # pandas: only when asked

    text = str(spec)
    config = config or SourceConfig.load()
    url = resolve(config.base_url, _paper_entry(text, config)[1].path) if text.startswith(SCHEME) else text
    return url, cache_path(url, cache_dir)


def _check_local(path: Path, sha256: str, sha256_from: str) -> None:

    if not path.exists():
        raise AglError(f"{path}: file not found")
    got = content_hash(path)
    if got != sha256:
        raise AglError(f"{path} has SHA-256 {got}, not the {sha256_from} {sha256} you gave; "
                       f"check the value (or leave {sha256_from} out)")
