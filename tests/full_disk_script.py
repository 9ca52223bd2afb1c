"""Run by tests/test_full_disk.py inside `unshare -m`, with a small tmpfs mounted at argv[1]
(a real full disk: ENOSPC from the kernel). Prints one JSON object of what happened."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

DISK, WORK = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(Path(__file__).parent))

from agl.cli import main  # noqa: E402

FILLER = DISK / "filler"


def fill(leave: int = 0) -> None:
    """Fill the disk, then give back `leave` bytes."""
    with open(FILLER, "ab") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    if leave:
        os.truncate(FILLER, max(0, FILLER.stat().st_size - leave))


def agl(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, err.getvalue()


out: dict = {}
manifest, audio = WORK / "manifest.csv", WORK / "audio"

# 1. agl infer fills the disk mid-run, then resumes once there is room.
fill(leave=8192)
rc, err = agl("infer", "--backend", "random", "--model", "uniform-latlon", "--manifest",
              str(manifest), "--out", str(DISK / "run"), "--no-progress")
preds = DISK / "run" / "predictions.jsonl"
raw = preds.read_bytes() if preds.exists() else b""
out["infer"] = {"rc": rc, "err": err, "whole_lines": raw.endswith(b"\n") or raw == b"",
                "lines": raw.count(b"\n")}
FILLER.unlink()
rc, err = agl("infer", "--backend", "random", "--model", "uniform-latlon", "--manifest",
              str(manifest), "--out", str(DISK / "run"), "--no-progress")
out["infer_resumed"] = {"rc": rc, "lines": preds.read_bytes().count(b"\n")}

# 2. agl evaluate --scores-out onto a full disk: one line, nothing under the final name.
fill()
rc, err = agl("evaluate", str(preds), "--manifest", str(manifest), "--bootstrap", "0",
              "--protocol", "strict",  # the paper protocol drops untagged clips, as these are
              "--scores-out", str(DISK / "scores.csv"))
out["evaluate"] = {"rc": rc, "err": err, "left": sorted(p.name for p in DISK.iterdir())}

# 3. the listening game: a guess the disk refuses is 507, and nothing half-written.
from agl.dataset.manifest import clips, load_manifest  # noqa: E402
from agl.game.session import GameSession, RequestError  # noqa: E402

FILLER.unlink()
session = GameSession.open(clips(load_manifest(manifest)), audio, "ada", DISK / "game")
fill()
first = clips(load_manifest(manifest))[0].key
try:
    session.guess({"clip_id": first, "latitude": 1.0, "longitude": 2.0})
    out["game"] = {"status": 200}
except RequestError as exc:
    path = session.predictions_path
    out["game"] = {"status": exc.status, "message": exc.message,
                   "bytes": path.stat().st_size if path.exists() else 0}
session.close()

# 4. agl export eee onto a full disk: one line, no record or samples file under its final name.
import shutil  # noqa: E402
import warnings  # noqa: E402

from agl.scoring.config import EvaluateConfig  # noqa: E402
from agl.scoring.evaluate import evaluate_run  # noqa: E402

FILLER.unlink()
runs = WORK / "runs" / "random"
runs.mkdir(parents=True)
for name in ("predictions.jsonl", "run_summary.json"):
    shutil.copyfile(DISK / "run" / name, runs / name)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    evaluate_run("random", runs / "predictions.jsonl", manifest, runs,
                 EvaluateConfig(metric_bootstrap=20, protocols=("strict",), track=False),
                 info={"model": "uniform-latlon", "backend": "random"})
fill()
rc, err = agl("export", "eee", "--runs", str(WORK / "runs"), "--manifest", str(manifest),
              "--out", str(DISK / "eee"), "--params", str(WORK / "none.yaml"))
left = sorted(p.relative_to(DISK).as_posix() for p in DISK.rglob("*") if p.is_file())
out["export"] = {"rc": rc, "err": err, "left": left}

# 5. MLflow's store created on a full disk: one line, no half-migrated store left, and a later
# run (with room) creates it whole; a read-only folder (argv[3]) is one line too.
from agl.core import tracking  # noqa: E402
from agl.errors import AglError  # noqa: E402


def log(db: Path) -> str:
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{db}"
    try:
        return "ok " + tracking.log_run(run_key="k", run_name="r", params={"p": 1}, metrics={"m": 1.0})
    except AglError as exc:
        return f"error {exc}"


FILLER.unlink()
fill(leave=300_000)  # room to start a store, none to migrate it
out["mlflow_full"] = {"said": log(DISK / "mlflow.db"),
                      "left": sorted(p.name for p in DISK.iterdir() if "mlflow" in p.name)}
FILLER.unlink()
out["mlflow_after"] = log(DISK / "mlflow.db")
if len(sys.argv) > 3:
    out["mlflow_readonly"] = log(Path(sys.argv[3]) / "mlflow.db")
print(json.dumps(out))
