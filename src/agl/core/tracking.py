"""MLflow tracking: one run per (model, data version), updated in place when re-evaluated.

The tracking URI is `MLFLOW_TRACKING_URI` or `sqlite:///mlflow.db` in the repository root
(the file store is refused by MLflow >= 3.13). A run is found again by its `agl.run_key`
tag, so re-logging the same inputs updates that run instead of adding a duplicate.
Secrets never reach MLflow: params, tags, run names, dataset names and artifacts are scrubbed
(`agl.core.secrets`: the environment's keys and the credentials of any URL).
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agl.core import diskwrite
from agl.core.headline import RANK_METRIC, run_metric_keys
from agl.core.jsonutil import flatten
from agl.core.mlflow_view import runs_url, save_view, ui_base
from agl.core.nofollow import open_part
from agl.core.secrets import contains_secret, known_secrets, scrub_text
from agl.core.secrets import scrub as scrub_secrets
from agl.core.workspace import shared_root
from agl.errors import AglError

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_EXPERIMENT = "agl1k"


def tracking_uri() -> str:
    """`MLFLOW_TRACKING_URI`, else the repository's mlflow.db (the real repository's when in a
    queued experiment's temporary workspace: see agl.core.workspace)."""

    root = shared_root() or REPO_ROOT
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"


def git_commit(cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd or REPO_ROOT, capture_output=True, text=True,
            timeout=10,
        )
        commit = out.stdout.strip() if out.returncode == 0 else "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd or REPO_ROOT,
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
        return commit + ("-dirty" if dirty and commit != "unknown" else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def scrub(value: Any) -> Any:
    """Replace any secret this process knows (see `agl.core.secrets`) by a marker, recursively."""
    return scrub_secrets(value)


def _clean_artifacts(paths: Iterable[Path], tmp: Path) -> list[Path]:
    """The paths to log: a file (or folder) holding a secret is logged as a scrubbed copy,
    so an artifact never carries a key whatever wrote it."""
    secrets = known_secrets()
    out = []
    for path in map(Path, paths):
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) \
            if path.is_dir() else []
        # a known key, or a URL with user:password@ or ?api-key= (contains_secret checks both)
        dirty = [f for f in files if contains_secret(f.read_bytes(), secrets)]
        if not dirty:
            out.append(path)
            continue
        copy = tmp / path.name
        for f in files:
            dest = copy if f == path else copy / f.relative_to(path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = f.read_bytes()
            if f in dirty:
                data = scrub_text(data.decode("utf-8", "surrogateescape"), secrets).encode(
                    "utf-8", "surrogateescape")
            diskwrite.write_bytes(dest, data)
        out.append(copy)
    return out


def _mlflow():
    import logging

    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    prepare_store(tracking_uri())
    mlflow.set_tracking_uri(tracking_uri())
    return mlflow


# --- The SQLite store: made whole or not at all, never through a link ----------------------
SQLITE_HEADER = b"SQLite format 3\x00"


def _store_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def prepare_store(uri: str) -> None:
    """Check (or create) the SQLite store `uri` names before MLflow opens it. A new store is
    made and migrated in a temporary file beside it and linked into place only once whole:
    MLflow migrating `mlflow.db` in place on a full disk used to leave a half-migrated store
    on which every later run failed until the user deleted it. A link at the store's path is
    refused (SQLite would write through it), and so is a file that is not an SQLite database
    (MLflow's error was a 200-line traceback)."""
    db = _store_path(uri)
    if db is None:
        return  # a server (PostgreSQL, ...): its own business
    try:
        st = os.lstat(db)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise diskwrite.disk_error(exc, db) or AglError(f"{db}: the MLflow store: {exc.strerror}") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise AglError(f"{db}: the MLflow store is a symbolic link to {os.readlink(db)}; agl writes no "
                       f"store through a link: set MLFLOW_TRACKING_URI=sqlite:///<the store's real "
                       f"path> to use that store, or remove the link")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise AglError(f"{db}: the MLflow store is not a file; move it away (or set "
                       "MLFLOW_TRACKING_URI), then rerun")
    if st is not None and st.st_size:
        try:
            with open(db, "rb") as fh:
                head = fh.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise diskwrite.disk_error(exc, db) or AglError(f"{db}: the MLflow store: {exc.strerror}") from None
        if head != SQLITE_HEADER:
            raise AglError(f"{db}: the MLflow store is not an SQLite database; move it away (or set "
                           "MLFLOW_TRACKING_URI to another store), then rerun")
        return
    _create_store(db)


def _create_store(db: Path) -> None:
    """A new, fully migrated store at `db` (an empty file there counts as none)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

    # A new name each try: SQLAlchemy keeps an engine per URI, and one left by a failed try
    # would still hold the deleted half-made file.
    tmp = db.with_name(f".{db.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        open_part(tmp).close()  # O_EXCL, no-follow: nothing planted at the name is used
        uri = f"sqlite:///{tmp}"
        try:
            _get_sqlalchemy_store(uri, None)
        finally:  # MLflow caches an engine per URI: closed, so no deleted half-file stays open
            engine = SqlAlchemyStore._engine_map.pop(uri, None)
            if engine is not None:
                engine.dispose()
        if db.exists() and not db.is_symlink() and db.stat().st_size == 0:
            db.unlink()  # an empty file is no store
        try:
            os.link(tmp, db)  # never over a store another process made meanwhile
        except FileExistsError:
            pass
    except Exception as exc:
        raise store_error(exc, db) from None
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            with contextlib.suppress(OSError):
                leftover.unlink()


_SQLITE_PROBLEMS = (
    ("database or disk is full", "cannot write: the disk is full; free space on that disk (or set "
                                 "MLFLOW_TRACKING_URI to a store elsewhere), then rerun"),
    ("readonly database", "cannot write: the store or its folder is read-only; make it writable "
                          "(or set MLFLOW_TRACKING_URI to a store elsewhere), then rerun"),
    ("unable to open database file", "cannot open or create the store there (a read-only or missing "
                                     "folder?); set MLFLOW_TRACKING_URI to a store you may write"),
    ("file is not a database", "the MLflow store is not an SQLite database; move it away (or set "
                               "MLFLOW_TRACKING_URI to another store), then rerun"),
    ("disk i/o error", "the disk failed a read or write; check it, then rerun"),
)


def store_error(exc: BaseException, db: Path | None = None) -> AglError:
    """One line for a store MLflow cannot use (full disk, read-only, not a database); an
    error of another kind is returned as is, wrapped only in its first line."""
    if isinstance(exc, AglError):
        return exc
    where = db or _store_path(tracking_uri()) or "the MLflow store"
    err = diskwrite.disk_error(exc, where)
    if err is not None:
        return err
    text = str(exc).lower()
    for needle, line in _SQLITE_PROBLEMS:
        if needle in text:
            return AglError(f"{where}: {line}")
    raise exc


def _store_errors(func):
    """Public MLflow calls: a store that cannot be used is one line (store_error)."""
    import functools

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except AglError:
            raise
        except Exception as exc:
            raise store_error(exc) from None

    return wrapper


# MLflow 3 up to 3.16 opens an experiment on the view its `mlflow.experimentKind` tag names;
# without it the UI guesses, and may open the GenAI (traces) view on an experiment of plain
# runs. agl's experiments are runs with params, metrics and artifacts: the classic runs table.
# MLflow 3.17 ignores the tag (a toggle in the browser decides): agl.core.mlflow_view's saved
# view and link open the runs there.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def experiment_name(experiment: str | None = None) -> str:
    """`experiment`, else `AGL_MLFLOW_EXPERIMENT`, else DEFAULT_EXPERIMENT."""
    return experiment or os.environ.get("AGL_MLFLOW_EXPERIMENT") or DEFAULT_EXPERIMENT


def experiment_id(client: Any, name: str) -> str:
    """The experiment `name`, created if absent, tagged so the UI opens on its runs (an
    experiment someone already tagged keeps its kind)."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return client.create_experiment(name, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
    if EXPERIMENT_KIND_TAG not in (exp.tags or {}):
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return exp.experiment_id


@_store_errors
def log_run(
    *,
    run_key: str,
    run_name: str,
    params: dict[str, Any],
    metrics: dict[str, Any],
    artifacts: Iterable[Path] = (),
    tags: dict[str, str] | None = None,
    experiment: str | None = None,
    dataset: dict[str, Any] | None = None,
) -> str:
    """Create or update the MLflow run identified by `run_key`; returns its run id.

    `dataset` ({name, digest, source, frame}) is logged with `mlflow.data` / `log_input`, so the
    UI's dataset column and filter show which data a run was scored on (see `log_dataset`).

    Non-finite and non-numeric metric values are skipped (MLflow cannot store NaN
    meaningfully); nested dicts are flattened with dots (`ci95.country_acc.lo`).
    """
    mlflow = _mlflow()
    client = mlflow.tracking.MlflowClient()
    exp_id = experiment_id(client, experiment_name(experiment))
    found = client.search_runs(
        [exp_id], filter_string=f"tags.`agl.run_key` = '{run_key}'", max_results=1
    )
    run_id = found[0].info.run_id if found else None
    flat_params = {k: str(v)[:6000] for k, v in flatten(scrub(params)).items()}
    flat_metrics = {
        k: float(v)
        for k, v in flatten(metrics).items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
    all_tags = {"agl.run_key": run_key, "git_commit": git_commit(), **scrub(tags or {})}
    run_name = scrub(run_name)
    with mlflow.start_run(run_id=run_id, experiment_id=exp_id, run_name=run_name) as run:
        # Params are immutable in MLflow; a changed value means a different run key upstream.
        existing = client.get_run(run.info.run_id).data.params if run_id else {}
        new_params = {k: v for k, v in flat_params.items() if k not in existing}
        if new_params:
            mlflow.log_params(new_params)
        changed = {k: v for k, v in flat_params.items() if k in existing and existing[k] != v}
        for k, v in changed.items():
            mlflow.set_tag(f"param_update.{k}", v)
        if flat_metrics:
            mlflow.log_metrics(flat_metrics)
        mlflow.set_tags(all_tags)
        if dataset is not None:
            log_dataset(mlflow, client, run.info.run_id, **dataset)
        with tempfile.TemporaryDirectory() as tmp:
            for path in _clean_artifacts(artifacts, Path(tmp)):
                if path.is_dir():
                    mlflow.log_artifacts(str(path), artifact_path=path.name)
                elif path.exists():
                    mlflow.log_artifact(str(path))
        return run.info.run_id


@_store_errors
def save_runs_view(metrics: Sequence[str], *, sort_by: str | None = None,
                   experiment: str | None = None) -> str:
    """Save the experiment's runs view with `metrics` as columns (agl.core.mlflow_view);
    returns the URL that opens it."""
    mlflow = _mlflow()
    client = mlflow.tracking.MlflowClient()
    exp_id = experiment_id(client, experiment_name(experiment))
    save_view(client, exp_id, metrics, sort_by)
    return runs_url(exp_id, ui_base(tracking_uri()))


@_store_errors
def runs_view_url(experiment: str | None = None) -> str:
    """The URL that opens the experiment's runs view, the view saved again from the headline
    metrics its evaluated runs carry (so a store an older agl wrote opens on them too). One
    line when the store has no such experiment or no evaluated run in it."""
    where = f"MLflow ({scrub_text(tracking_uri(), known_secrets())})"
    db = tracking_uri().removeprefix("sqlite:///")
    if db != tracking_uri() and not Path(db).exists():  # MLflow would create an empty one
        raise AglError(f"{where}: no such database; `dvc repro` logs the evaluated runs there")
    mlflow = _mlflow()
    client = mlflow.tracking.MlflowClient()
    name = experiment_name(experiment)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        raise AglError(f"{where} has no experiment '{name}': `dvc repro` logs the evaluated runs "
                       "there (MLFLOW_TRACKING_URI picks the store, --experiment the experiment)")
    # an evaluated run logs `<protocol>.distance_error_km` for each protocol it was scored under
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    protocols = {k.split(".")[0] for run in runs
                 for k in run.data.metrics if k.count(".") == 1 and k.endswith(".distance_error_km")}
    if not protocols:
        raise AglError(f"{where}: experiment '{name}' has no evaluated run yet; `dvc repro` "
                       "evaluates them")
    keys = run_metric_keys(sorted(protocols, key=lambda p: (p != "paper", p)))  # paper first
    if any(RANK_METRIC in run.data.metrics for run in runs):  # the track stage logged ranks
        keys = [RANK_METRIC, *keys]  # sorted as the leaderboard ranks, unranked runs last
    save_view(client, exp.experiment_id, keys, keys[0])
    return runs_url(exp.experiment_id, ui_base(tracking_uri()))


# MLflow's dataset table holds a digest of at most 36 characters (String(36)); the full SHA-256
# stays in the run's `data_version` tag.
DIGEST_CHARS = 36


def log_dataset(mlflow: Any, client: Any, run_id: str, *, name: str, digest: str, source: str,
                frame: Any, context: str = "evaluation") -> None:
    """Log the dataset once per run: name, digest (the manifest's content hash), source."""
    digest = str(digest)[:DIGEST_CHARS]
    name, source = scrub(name), scrub(source)
    logged = client.get_run(run_id).inputs.dataset_inputs
    if any(d.dataset.name == name and d.dataset.digest == digest for d in logged):
        return  # re-evaluating the same data updates the run without a second input
    import warnings

    with warnings.catch_warnings():  # "source can be interpreted in multiple ways": it is a file
        warnings.simplefilter("ignore", UserWarning)
        data = mlflow.data.from_pandas(frame, source=source, name=name, digest=digest)
    mlflow.log_input(data, context=context)


@_store_errors
def log_artifacts(run_id: str, paths: Iterable[Path], artifact_path: str | None = None) -> None:
    mlflow = _mlflow()
    client = mlflow.tracking.MlflowClient()
    with tempfile.TemporaryDirectory() as tmp:
        for path in _clean_artifacts(paths, Path(tmp)):
            if path.is_dir():
                client.log_artifacts(run_id, str(path), artifact_path=artifact_path or path.name)
            elif path.exists():
                client.log_artifact(run_id, str(path), artifact_path=artifact_path)
