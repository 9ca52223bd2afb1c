"""What a report is built from: the evaluated runs, and the params' `report:` section.

`collect_runs` finds every evaluated run (`<dir>/<run>/metrics.json` with its per-clip
`scores_<protocol>.csv` beside, written by the evaluate and paper stages);
`ReportConfig.from_params` reads params.yaml `report:` (`ReportOptions`, the error-mode judge,
tracking) and `ReportInputs` names the files the report reads. `agl.report.build` turns them
into the report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agl.core.checks import check_params, check_resamples, param_value
from agl.core.tables import read_whole_csv
from agl.errors import AglError, reject_unknown_keys
from agl.judges.modes import JudgeConfig, judge_from_config
from agl.predictions.records import read_predictions
from agl.scoring.clusters import DEFAULT_UNIT, cluster_labels, parse_unit


@dataclass
class RunInput:
    """One evaluated run: its name, per-clip scores, predictions (for the judge) and info."""

    name: str
    scored: pd.DataFrame
    predictions: dict[str, Any] | None = None  # for the judge: reasoning per clip
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportOptions:
    """params.yaml `report:` (less `judge` and `track`): what the report computes and shows."""

    protocol: str = "paper"
    group_bootstrap: int = 1000  # resamples per 95% CI of each breakdown row (a group of clips)
    seed: int = 0
    min_country_clips: int = 10
    confidence_bins: int = 5
    factor_bootstrap: int = 200
    paired_bootstrap: int = 2000
    paired_permutations: int = 10000
    wrong_km: float = 750.0
    maps_for: int = 6  # maps and confusion heat maps for the best N runs (by mean km)
    min_support: int = 10  # clips behind an estimate (group mean, accuracy, factor presence)
    factor_min_events: int = 10  # correct and wrong answers per factor of the regression
    # The clip explorer's page (`agl explore --export build/explore`) relative to report.html,
    # as params.yaml `report.explorer` gives it: a breakdown row that names clips links to
    # them there; "" (or null in params) for no links.
    explorer: str = ""
    # What every interval and test resamples (agl.scoring.clusters): clip, cell:<deg>, city,
    # site:<km>; each run's score table gains a `cluster` column of it (with_clusters).
    resampling_unit: str = DEFAULT_UNIT

    def __post_init__(self) -> None:
        object.__setattr__(self, "resampling_unit",
                           parse_unit(self.resampling_unit, "params report.resampling_unit").name)


def with_clusters(runs: list[RunInput], unit: str) -> list[RunInput]:
    """Each run's score table with a `cluster` column under `unit`: the clusters of the union
    of the runs' clips (a `site` chain does not depend on which run scored which clip), so two
    runs' common clips carry the same clusters in a paired test."""
    if not runs:
        return runs
    truth = pd.concat([r.scored[["sample_id", "true_lat", "true_lon", "true_city", "true_country"]]
                       for r in runs], ignore_index=True).drop_duplicates("sample_id")
    label = dict(zip(truth["sample_id"], cluster_labels(truth, unit), strict=True))
    for r in runs:
        r.scored["cluster"] = r.scored["sample_id"].map(label).to_numpy(dtype=np.int64)
    return runs


def collect_runs(roots: list[Path], protocol: str) -> list[RunInput]:
    """Every `<root>/<run>/metrics.json` that has `scores_<protocol>.csv` beside it."""
    runs = []
    for root in roots:
        for metrics in sorted(Path(root).glob("*/metrics.json")):
            scores = metrics.parent / f"scores_{protocol}.csv"
            if not scores.exists():
                continue
            doc = json.loads(metrics.read_text())
            name = str(doc.get("run") or metrics.parent.name)
            frame = read_whole_csv(scores, f"re-run the evaluate stage of {name}",
                                   keep_default_na=True)
            scored = (doc.get("protocols") or {}).get(protocol) or {}
            n = scored.get("n")
            if isinstance(n, int) and len(frame) != n:  # cut at a row's end, or stale
                raise AglError(f"{scores}: {len(frame)} row(s), but {metrics} scored {n}: a "
                               f"cut or stale table, not reported; re-run the evaluate stage "
                               f"of {name}")
            for col in ("has_speech", "refused", "failed"):
                frame[col] = frame[col].astype(str).str.lower().eq("true")
            preds_path = metrics.parent / "predictions.jsonl"
            preds = read_predictions(preds_path) if preds_path.exists() else None
            runs.append(RunInput(name, frame, preds, {
                "metrics": str(metrics), "data_version": str(doc.get("data_version") or ""),
                "dataset": str(doc.get("dataset") or ""), "dataset_clips": doc.get("dataset_clips"),
                # The stability section and the counterfactual's noise floor read it here,
                # instead of each parsing metrics.json again.
                "repeats": scored.get("repeats")}))
    return runs


def options_from_config(cfg: dict[str, Any]) -> ReportOptions:
    """ReportOptions from params.yaml `report:`; an unknown key or a value of the wrong type
    is one line naming it."""
    known = ReportOptions.__dataclass_fields__
    reject_unknown_keys(cfg, set(known) | {"judge", "track"}, "params report")
    check_params("report", {k: v for k, v in cfg.items() if k != "judge"})
    values = {}
    for k, v in cfg.items():
        if k == "explorer" and v is None:  # null: no links
            v = ""
        if k in known:
            kind = type(getattr(ReportOptions, k))
            try:
                values[k] = kind(v)
            except (TypeError, ValueError):
                raise AglError(f"params report.{k}: {v!r} is not a {kind.__name__}") from None
    return ReportOptions(**values)


# The resample and permutation counts of `report:`, bounded by evaluate.max_resamples.
RESAMPLE_KEYS = ("group_bootstrap", "factor_bootstrap", "paired_bootstrap", "paired_permutations")


@dataclass(frozen=True)
class ReportConfig:
    """params.yaml `report:`: what the report computes (`options`), the judge it names (its
    tables come from the judge stage), whether it logs to MLflow, and the section as given (less
    `judge` and `track`) for the provenance."""

    options: ReportOptions = field(default_factory=ReportOptions)
    judge: JudgeConfig | None = None
    track: bool = True
    params: dict[str, Any] = field(default_factory=dict)
    experiment: str | None = None  # MLflow experiment (params.yaml mlflow.experiment)

    @classmethod
    def from_params(cls, section: dict[str, Any] | None, *, experiment: str | None = None,
                    max_resamples: int | None = None, source: str = "params.yaml") -> ReportConfig:
        """From params.yaml `report:`; an unknown key or a value of the wrong type is one line,
        and so is a resample or permutation count past `max_resamples` (evaluate.max_resamples)."""
        cfg = dict(section or {})
        check_resamples({f"report.{k}": (cfg.get(k, getattr(ReportOptions, k)), 1) for k in RESAMPLE_KEYS},
                        max_resamples, source)
        track = param_value("report.track", cfg.pop("track", True), source)  # the one table
        return cls(options=options_from_config(cfg), judge=judge_from_config(cfg.get("judge")),
                   track=track, params={k: v for k, v in cfg.items() if k != "judge"},
                   experiment=experiment)


@dataclass(frozen=True)
class ReportInputs:
    """The files a report reads: evaluated run folders, the leaderboard and manifest, the
    judges' tables, and the optional sections' tables (None: that section is not shown)."""

    run_dirs: tuple[Path, ...]
    leaderboard_csv: Path | None = None
    manifest: Path | None = None
    judges_dir: Path | None = None  # <run>/error_modes.csv of the judge stage
    birds_csv: Path | None = None
    counterfactual_dir: Path | None = None  # holds effects.csv
    sensitivity_csv: Path | None = None
    speech_csv: Path | None = None
    # The duplicates stage's table (agl.dataset.fingerprints): each pair of clips is one cluster
    duplicates_csv: Path | None = None
    extra_provenance: dict[str, Any] = field(default_factory=dict)
