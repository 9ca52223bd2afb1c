"""The dataset folder (`data/`): which dataset, where its manifest comes from, how it is filled.

`data.dataset` in params.yaml picks one of:
- `demo`: the SYNTHETIC demo set, generated offline (agl.dataset.demo);
- `agl1k`: the published AGL1K manifest, fetched from its pinned URL and checked against its
  pinned SHA-256, then every clip from the Internet Archive (agl.dataset.download);
- a path (or http(s) URL) to any manifest CSV in the AGL1K schema, e.g. one `agl crawl` wrote.

Whatever the source, the folder has one layout: `manifest.csv` (the full 20-column AGL1K
layout, header defect repaired), `audio/<key>/<mp3name>`, and `lock.json` (size and SHA-256 of
every clip, plus where the manifest came from).
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agl.core import diskwrite
from agl.core.checks import param_rule, param_value, sha256_value
from agl.core.jsonutil import dumps
from agl.core.nofollow import open_part
from agl.core.paths import inside, remove
from agl.core.reach import Reach, archive_or_server
from agl.core.single_writer import exclusive
from agl.dataset.checksums import file_digest, read_lock, read_source, write_lock
from agl.dataset.croissant import write_card
from agl.dataset.dates import with_dates
from agl.dataset.demo import DEFAULT_SEED, RECIPES, demo_source, key_of, write_demo
from agl.dataset.download import download_clips
from agl.dataset.fetch import FinalError, Policy, RetryableError, fetch_document, get_json, make_client, sha256_hex
from agl.dataset.manifest import DATE_COLUMNS, ManifestWarning, clips, load_manifest, parse_manifest, write_manifest
from agl.dataset.manifest_text import decode_manifest
from agl.dataset.tag_audit import TABLE, audit, summary_line, write_table
from agl.errors import AglError, reject_unknown_keys
from agl.http.bounds import check_redirect_hosts

if TYPE_CHECKING:
    import httpx

    from agl.dataset.fetch import Policy

AGL1K_MANIFEST_URL = (
    "https://raw.githubusercontent.com/Rising0321/AGL1K/"
    "ab53ad0a78ec4306f2d9437aae3da6984f45403f/data/geoLocalization_schema.csv"
)
AGL1K_MANIFEST_SHA256 = "4f5c09b9336b5cfe689cc76f04eb8eabb794e53763ef6d81eb150bfce08b4f3b"


@dataclass(frozen=True)
class DatasetSpec:
    """What to put in the dataset folder."""

    dataset: str = "demo"  # demo | agl1k | path or URL of a manifest CSV
    out: Path = Path("data")
    manifest_url: str = AGL1K_MANIFEST_URL
    manifest_sha256: str | None = AGL1K_MANIFEST_SHA256  # None: accept whatever is served
    demo_seed: int | None = None  # None: agl.dataset.demo.DEFAULT_SEED
    prune: bool = True  # remove audio the manifest does not name (DVC's cache keeps it)
    # coordinates in a tag this close to the truth give the place away (agl.dataset.tag_audit)
    tag_audit_km: float = 25.0


def prepare(
    spec: DatasetSpec,
    policy: Policy,
    client: httpx.Client | None = None,
    summary_path: Path | None = None,
) -> dict:
    """Fill `spec.out` for `spec.dataset`; returns the run's summary (printed, and written to
    `summary_path` even when the run then fails past its failure budget)."""

    with exclusive(spec.out, "agl download"):  # a second run refuses: no racing .part files
        return _prepare(spec, policy, client, summary_path)


def _prepare(spec: DatasetSpec, policy: Policy, client: httpx.Client | None,
             summary_path: Path | None) -> dict:
    out = Path(spec.out)
    if spec.dataset == "demo":
        result = _prepare_demo(spec, out)
        _audit_tags(out, spec.tag_audit_km)
        write_card(out)  # data/croissant.json: the folder's Croissant card (agl.dataset.croissant)
        if summary_path:
            write_summary(summary_path, result)
        return result

    known = _known_dates(out / "manifest.csv")  # before the manifest is written again
    frame, source = _manifest(spec, out, policy, client)
    rows = clips(frame)
    _prune(out, {c.key for c in rows}, {c.relpath for c in rows}, spec.prune)
    _write_manifest(frame, out / "manifest.csv")
    write_lock(out / "lock.json", read_lock(out / "lock.json"), source=source)
    summary = download_clips(rows, out, policy, client=client, check=False)
    _write_manifest(_dated(frame, out, policy, client, known), out / "manifest.csv")
    write_card(out)  # from the manifest and the lock as downloaded: the same data, the same card
    print(f"agl download: {out}: {summary.line()}", file=sys.stderr)
    for r in summary.failed:
        print(f"agl download: {r.status} {r.relpath}: {r.reason}", file=sys.stderr)
    _audit_tags(out, spec.tag_audit_km, rows)  # the clips it has, whatever failed
    result = {"dataset": spec.dataset, "out": str(out), **source, **summary.as_dict()}
    if summary_path:
        write_summary(summary_path, result)
    summary.check(policy.failure_budget, out / "lock.json")
    return result


def _known_dates(target: Path):
    """The date columns of the manifest already there (None: none, or not readable)."""
    if not target.is_file():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ManifestWarning)
            return load_manifest(target, columns=list(DATE_COLUMNS))
    except AglError:
        return None  # a damaged manifest is written again; its dates are asked again


def _dated(frame, out: Path, policy: Policy, client: httpx.Client | None, known):
    """The manifest with the recording date its files' tags give and the upload date the
    Archive's item metadata gives (agl.dataset.dates), each item asked once across runs."""
    if policy.metadata_url is None:
        return with_dates(frame, out / "audio", None, known)
    own = client is None
    client = client or make_client(policy)
    base = policy.metadata_url.rstrip("/")

    def metadata(key: str):
        from urllib.parse import quote

        try:
            return get_json(client, f"{base}/{quote(key, safe='')}", policy)
        except (FinalError, RetryableError):
            return None  # unknown: asked again next run

    try:
        return with_dates(frame, out / "audio", metadata, known)
    finally:
        if own:
            client.close()


def _prepare_demo(spec: DatasetSpec, out: Path) -> dict:

    keys = {key_of(i) for i in range(len(RECIPES))}
    _prune(out, keys, None, spec.prune)
    seed = DEFAULT_SEED if spec.demo_seed is None else spec.demo_seed
    if _demo_matches_lock(out, seed, keys):
        print(f"agl download: {out}: the SYNTHETIC demo set (seed {seed}) already matches "
              f"{out / 'lock.json'}; nothing to do", file=sys.stderr)  # fmt: skip
        return {"dataset": "demo", "out": str(out), "synthetic": True, "seed": seed,
                "clips": len(keys), "generated": 0, "failed": 0, "missing": {}}  # fmt: skip
    made = write_demo(out, seed=seed)
    print(f"agl download: {out}: generated {len(made)} SYNTHETIC demo clips (seed {seed})",
          file=sys.stderr)  # fmt: skip
    return {"dataset": "demo", "out": str(out), "synthetic": True, "seed": seed,
            "clips": len(made), "generated": len(made), "failed": 0, "missing": {}}  # fmt: skip


def _demo_matches_lock(out: Path, seed: int, keys: set[str]) -> bool:
    """True when `out` already holds the demo set of `seed`: the lock names the generator and
    seed, one clip per demo key, and every clip has the lock's size and SHA-256 (about 0.1 s
    instead of ~11 s of generation). The generator is deterministic, so this is the set it
    would write; after editing agl.dataset.demo itself, delete data/ to regenerate."""

    lock_path = out / "lock.json"
    if read_source(lock_path) != demo_source(seed):
        return False
    if not all((out / name).is_file() for name in ("manifest.csv", "demo_truth.json")):
        return False
    try:
        entries = read_lock(lock_path)
    except AglError:  # a broken lock: regenerate, which rewrites it
        return False
    if sorted(rel.split("/", 1)[0] for rel in entries) != sorted(keys):
        return False
    for rel, entry in entries.items():
        path = out / "audio" / rel
        if not path.is_file() or path.stat().st_size != entry.size or file_digest(path) != entry:
            return False
    return True


def _manifest(spec: DatasetSpec, out: Path, policy, client):
    """The manifest as a validated frame, written to `<out>/manifest.csv` in AGL1K layout."""

    target = out / "manifest.csv"
    if spec.dataset == "agl1k":
        where, pinned = spec.manifest_url, spec.manifest_sha256
    else:
        where, pinned = spec.dataset, None
    remote = where.startswith(("http://", "https://"))
    recorded = read_source(out / "lock.json") or {}
    if (
        remote
        and pinned
        and target.exists()
        and recorded.get("manifest") == where
        and recorded.get("manifest_sha256") == pinned
    ):
        # fetched and verified before: the pin says it cannot have changed, so stay offline
        return load_manifest(target), recorded
    if remote:
        raw = fetch_document(where, policy, client)
    else:
        path = Path(where)
        if not path.is_file():
            raise AglError(
                f"data.dataset: {where!r} is not demo, agl1k, or an existing manifest file; "
                "fix params.yaml (or pass --dataset)"
            )
        raw = path.read_bytes()
    digest = sha256_hex(raw)
    if pinned and digest != pinned:
        raise AglError(
            f"{where}: SHA-256 {digest} differs from the pinned {pinned}; the published "
            "manifest changed: check it, then update download.manifest_sha256 if intended"
        )
    text = decode_manifest(raw, where)  # one line naming the line of a bad byte or a NUL
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ManifestWarning)
        frame = parse_manifest(text, source=where)
    for w in caught:
        print(f"agl download: note: {w.message}", file=sys.stderr)
    return frame, {"manifest": where, "manifest_sha256": digest}


def _write_manifest(frame, target: Path) -> None:
    """AGL1K's 20-column layout, atomically; an identical file is left untouched."""

    staged = target.with_name(".manifest.csv.part")
    with open_part(staged) as fh:  # never through a link planted there
        write_manifest(frame, fh)
    if target.exists() and target.read_bytes() == staged.read_bytes():
        staged.unlink()
    else:
        staged.replace(target)


def _audit_tags(out: Path, radius_km: float, rows=None) -> None:
    """`data/tag_audit.csv`: what each clip's tags and file name give away (pinned with the
    data by data.dvc; agl.dataset.tag_audit), and its count in one line."""
    if rows is None:
        rows = clips(load_manifest(out / "manifest.csv"))
    audited = audit(rows, out / "audio", radius_km)
    write_table(audited, out / TABLE)
    print(f"agl download: {out / TABLE}: {summary_line(audited)}", file=sys.stderr)


def _prune(out: Path, keys: set[str], relpaths: set[str] | None, prune: bool) -> None:
    """Make the folder hold only the manifest's clips (and their .part files)."""
    audio = out / "audio"
    if audio.is_symlink():
        inside(out, audio)  # a data folder whose audio lives elsewhere is refused, named
    foreign = sorted(p for p in audio.iterdir() if p.name not in keys) if audio.is_dir() else []
    if foreign and not prune:
        raise AglError(
            f"{audio} holds {len(foreign)} clip folder(s) the manifest does not name "
            f"({foreign[0].name}, ...); set download.prune: true or use another download.out"
        )
    for path in foreign:
        remove(path)  # a link is removed as a link: pruning never follows one out of `audio`
    if foreign:
        print(
            f"agl download: removed {len(foreign)} clip folder(s) not in the manifest from "
            f"{audio} (the previous version stays in DVC's cache: `dvc checkout` restores it)",
            file=sys.stderr,
        )
    truth = out / "demo_truth.json"
    if relpaths is not None and truth.exists():
        truth.unlink()  # the synthetic set's sidecar must not sit beside real data
    lock_path = out / "lock.json"
    if relpaths is not None and lock_path.exists():
        lock = read_lock(lock_path)
        kept = {rel: e for rel, e in lock.items() if rel in relpaths}
        if len(kept) != len(lock):
            write_lock(lock_path, kept)


# The keys of `download:`; the types of those that have no rule in agl.core.checks.PARAMS.
DOWNLOAD_KEYS = {
    "out": str,
    "manifest_url": str,
    "manifest_sha256": (str, type(None)),
    "base_url": str,
    "metadata_url": (str, type(None)),
    "jobs": int,
    "timeout_s": (int, float),
    "deadline_s": (int, float),
    "min_rate_bps": (int, float),
    "stall_window_s": (int, float),
    "max_document_bytes": int,
    "max_clip_bytes": int,
    "redirect_hosts": list,
    "retries": int,
    "backoff_s": (int, float),
    "max_backoff_s": (int, float),
    "failure_budget": int,
    "offline_after": int,
    "duration_tolerance": (int, float, type(None)),
    "prune": bool,
    "demo_seed": (int, type(None)),
    "tag_audit_km": (int, float),
    "summary": (str, type(None)),
}


def from_params(
    params: dict,
    source: str = "params.yaml",
    dataset: str | None = None,
    progress: bool = True,
    **overrides,
):
    """(DatasetSpec, Policy, summary path) from params.yaml's `data` and `download` sections.

    `overrides` (command-line flags) replace `download` keys and `dataset` replaces
    `data.dataset`; None keeps the params value. Errors name the file and the key.
    """

    data = params.get("data") or {}
    section = _checked_download(params.get("download"), overrides, source)
    dataset = dataset or data.get("dataset", "demo")
    if not isinstance(dataset, str) or not dataset:
        raise AglError(f"{source}: data.dataset must be demo, agl1k or a manifest path")
    spec = DatasetSpec(
        dataset=dataset,
        out=Path(section.get("out", "data")),
        manifest_url=section.get("manifest_url", AGL1K_MANIFEST_URL),
        manifest_sha256=section.get("manifest_sha256", AGL1K_MANIFEST_SHA256),
        demo_seed=section.get("demo_seed"),
        prune=section.get("prune", True),
        tag_audit_km=float(section.get("tag_audit_km", 25.0)),
    )
    summary = section.get("summary")
    return spec, _policy(section, progress), Path(summary) if summary else None


def _checked_download(download: dict | None, overrides: dict, source: str) -> dict:
    """params.yaml `download:` with the command's overrides, each key checked (type, range)."""
    section = dict(download or {})
    for key, value in overrides.items():
        if value is not None:
            section[key] = value
    reject_unknown_keys(section, set(DOWNLOAD_KEYS), f"{source}: download")
    for key, value in section.items():
        if param_rule(f"download.{key}") is not None:
            # the one table (agl.core.checks.PARAMS): `jobs: true` was one download (a bool
            # is an int), and 4.0 a wrong type
            section[key] = param_value(f"download.{key}", value, source)
        elif not isinstance(value, DOWNLOAD_KEYS[key]):  # text: a path, a URL, a hash
            raise AglError(f"{source}: download.{key}: {value!r} has the wrong type")
    if section.get("manifest_sha256") is not None:
        section["manifest_sha256"] = sha256_value(section["manifest_sha256"],
                                                  f"{source}: download.manifest_sha256")
    if "redirect_hosts" in section:
        section["redirect_hosts"] = list(check_redirect_hosts(section["redirect_hosts"],
                                                              f"{source}: download.redirect_hosts"))
    return section


def _policy(section: dict, progress: bool) -> Policy:
    """How the download runs, from the checked `download:` section (defaults: Policy's)."""
    defaults = Policy()
    return Policy(
        base_url=section.get("base_url", defaults.base_url),
        metadata_url=section.get("metadata_url", defaults.metadata_url),
        jobs=section.get("jobs", defaults.jobs),
        timeout_s=float(section.get("timeout_s", defaults.timeout_s)),
        deadline_s=float(section.get("deadline_s", defaults.deadline_s)),
        min_rate_bps=float(section.get("min_rate_bps", defaults.min_rate_bps)),
        stall_window_s=float(section.get("stall_window_s", defaults.stall_window_s)),
        max_document_bytes=section.get("max_document_bytes", defaults.max_document_bytes),
        max_clip_bytes=section.get("max_clip_bytes", defaults.max_clip_bytes),
        redirect_hosts=tuple(section.get("redirect_hosts", [])),
        retries=section.get("retries", defaults.retries),
        backoff_s=float(section.get("backoff_s", defaults.backoff_s)),
        max_backoff_s=float(section.get("max_backoff_s", defaults.max_backoff_s)),
        failure_budget=section.get("failure_budget", defaults.failure_budget),
        offline_after=section.get("offline_after", defaults.offline_after),
        duration_tolerance=section.get("duration_tolerance", defaults.duration_tolerance),
        progress=progress,
        # one count for the whole command: the manifest's fetch, metadata and every clip
        reach=Reach(archive_or_server, section.get("offline_after", defaults.offline_after),
                    "download.offline_after"),
    )


def write_summary(path: Path, summary: dict) -> None:
    """The download summary as sorted, indented JSON (a DVC output: same run, same bytes)."""
    diskwrite.write_text(path, dumps(summary, indent=1, sort_keys=True) + "\n")
