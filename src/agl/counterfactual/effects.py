"""Counterfactual listening: derived datasets, and the paired effect of each intervention.

`derive_dataset` writes, for every level of one intervention, a complete dataset folder in
`data/`'s layout (`manifest.csv`, `audio/<key>/<mp3name>`, `lock.json`) plus `perturb.csv`
(what was measured per clip), so inference reads it exactly like `data/`. `stratified_subset`
keeps paid runs affordable. `paired_effects` compares a model on the perturbed clips with the
same model on the same original clips: the change in mean km and in country / continent
accuracy, with paired bootstrap CIs and sign-flip permutation p-values, overall, by speech
and by continent.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agl.core import canonical
from agl.core.checks import check_names, check_params, check_resamples
from agl.core.paths import remove
from agl.core.tables import read_whole_csv
from agl.counterfactual.perturb import KINDS, Intervention
from agl.counterfactual.perturb_clips import AS_PUBLISHED, file_name, perturb_clips
from agl.dataset.checksums import read_source, write_lock
from agl.dataset.manifest import ManifestWarning, content_hash, load_manifest, write_manifest
from agl.errors import AglError, reject_unknown_keys
from agl.executor.config import ExecutorConfig
from agl.scoring.clusters import DEFAULT_UNIT, cluster_labels, parse_unit
from agl.scoring.config import BOOTSTRAP, check_fields, knob
from agl.scoring.paired import holm, paired_test

SPEECH_THRESHOLD = 0.1  # the paper's "has speech": human_sounds >= 0.1 (agl.scoring.score_table)


@dataclass(frozen=True)
class Subset:
    """Which clips a derived dataset holds: `size` of them, stratified (`stratified_subset`)."""

    size: int | None = None  # None: every clip
    seed: int = 0

    @classmethod
    def from_params(cls, section: dict[str, Any] | None, source: str = "params.yaml") -> Subset:
        """params.yaml `counterfactual.subset:` (null: every clip), checked by the one table."""
        section = dict(section or {})
        reject_unknown_keys(section, {"size", "seed"}, f"{source} counterfactual.subset")
        check_params("counterfactual.subset", section, source)
        return cls(size=section.get("size"), seed=int(section.get("seed", 0)))


def strata(frame: pd.DataFrame) -> pd.Series:
    """continent x speech, the two axes the paper's findings split on."""
    speech = pd.to_numeric(frame["human_sounds"], errors="coerce").fillna(0) >= SPEECH_THRESHOLD
    continent = frame["continent"].fillna("").astype(str).replace("", "unknown")
    return continent + "|" + np.where(speech, "speech", "non_speech")


def stratified_subset(frame: pd.DataFrame, subset: Subset) -> pd.DataFrame:
    """`size` clips spread as evenly as possible over the continent x speech strata (round
    robin over strata in sorted order, each stratum shuffled by `seed`); manifest order kept."""
    if subset.size is None or subset.size >= len(frame):
        return frame.reset_index(drop=True)
    if subset.size < 1:
        raise AglError(f"perturb subset size must be at least 1, not {subset.size}")
    rng = np.random.default_rng(subset.seed)
    groups = {s: list(rng.permutation(idx)) for s, idx in sorted(frame.groupby(strata(frame)).indices.items())}
    chosen: list[int] = []
    while len(chosen) < subset.size:
        for s in groups:
            if groups[s] and len(chosen) < subset.size:
                chosen.append(int(groups[s].pop(0)))
    return frame.iloc[sorted(chosen)].reset_index(drop=True)


def derive_dataset(
    parent: Path,
    out: Path,
    levels: list[Intervention],
    *,
    subset: Subset = Subset(),
    fmt: str = "mp3",
    progress: bool = False,
    jobs: int = 1,
    transport: ExecutorConfig | None = None,
) -> dict[str, Any]:
    """Write `out/<level>/` for every level; returns a summary (deterministic values only).
    The clips are perturbed by `jobs` processes or where `transport` says (agl.executor):
    the same files and summary either way."""
    parent, out = Path(parent), Path(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        frame = stratified_subset(load_manifest(parent / "manifest.csv"), subset)
    remove(out)  # made again from scratch; a link there is removed, never followed
    if KINDS[levels[0].kind].container:
        fmt = AS_PUBLISHED  # the file itself: no format to encode to
    parent_version = content_hash(parent / "manifest.csv")
    per_level, locks, failed = perturb_clips(parent, out, frame, levels, fmt, progress, jobs, transport)
    iv0 = levels[0]
    summary: dict[str, Any] = {
        "intervention": iv0.name,
        "kind": iv0.kind,
        "parent_manifest_sha256": parent_version,
        "clips": len(frame),
        "subset": {"size": subset.size, "seed": subset.seed},
        "format": fmt,
        "levels": {},
    }
    if failed:  # only then: a dataset where every clip decodes keeps its summary's bytes
        summary["failed"] = dict(sorted(failed.items()))
    if len(failed) == len(frame):
        key, why = next(iter(sorted(failed.items())))
        raise AglError(f"{parent / 'audio'}: none of the {len(frame)} clip(s) decodes (first: "
                       f"{key}: {why}); fill {parent} again (agl download)")
    frame = frame[~frame["key"].isin(failed)].reset_index(drop=True)
    source = {"parent_manifest_sha256": parent_version, "subset": {"size": subset.size, "seed": subset.seed},
              "format": fmt}
    for iv in levels:
        summary["levels"][iv.level] = _write_level(out / iv.level, frame, iv, per_level[iv.level],
                                                   locks[iv.level], source)
    return summary


def _write_level(folder: Path, frame: pd.DataFrame, iv: Intervention, rows: list[dict[str, Any]],
                 lock: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """One level's manifest, perturb.csv and lock.json; returns its summary entry."""
    fmt = source["format"]
    folder.mkdir(parents=True, exist_ok=True)
    measured = pd.DataFrame(rows)
    derived = frame.copy()
    if not measured.empty:
        derived["mp3seconds"] = measured["seconds_out"].to_numpy()
        derived["mp3name"] = [file_name(n, fmt) for n in derived["mp3name"]]
        canonical.write_csv(measured, folder / "perturb.csv")
    write_manifest(derived, folder / "manifest.csv")
    write_lock(
        folder / "lock.json",
        lock,
        source={
            "parent_manifest_sha256": source["parent_manifest_sha256"],
            "intervention": iv.describe(),
            "subset": source["subset"],
            "format": fmt,
        },
    )
    return {
        "value": iv.value,
        "manifest_sha256": content_hash(folder / "manifest.csv"),
        "audio_minutes": round(float(measured["seconds_out"].sum()) / 60, 3) if not measured.empty else 0.0,
    }


# --- paired analysis -----------------------------------------------------------------------------

EFFECT_COLUMNS = (
    "model",
    "intervention",
    "kind",
    "level",
    "value",
    "group",
    "metric",
    "n",
    "n_clusters",
    "mean_original",
    "mean_perturbed",
    "diff",
    "ci_lo",
    "ci_hi",
    "p_value",
    "p_holm",  # Holm-adjusted over the family: one model's every effect (collect_effects)
    "note",
    "family",
)
METRICS = (("distance_km", 3), ("country_correct", 6), ("continent_correct", 6))


def groups(joined: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    speech = joined["has_speech"].astype(str).str.lower().eq("true")
    out = [("all", joined), ("speech", joined[speech]), ("non_speech", joined[~speech])]
    continent = joined["true_continent"].fillna("unknown").astype(str)
    out += [(f"continent={c}", joined[continent == c]) for c in sorted(continent.unique())]
    if "duration_s" in joined:  # a long-audio comparison: where hearing more helps
        out += duration_groups(joined)
    return out


def duration_groups(joined: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The paired clips by quartile of length (`duration_s`), named with its range
    (`duration=Q1 (34-104 s)`); equal lengths share one (fewer groups where they must)."""
    seconds = pd.to_numeric(joined["duration_s"], errors="coerce").dropna()
    if len(seconds) < 2:
        return []
    bins = pd.qcut(seconds.rank(method="min"), 4, labels=False, duplicates="drop")
    parts = [seconds[bins == q] for q in sorted(bins.unique())]
    return [(f"duration=Q{i + 1} ({x.min():.0f}-{x.max():.0f} s)", joined.loc[x.index])
            for i, x in enumerate(parts)]


def paired_effects(
    original: pd.DataFrame,
    perturbed: pd.DataFrame,
    *,
    n_boot: int = 2000,
    n_perm: int = 10000,
    seed: int = 0,
    min_support: int = 1,
    unit: str = "clip",
) -> pd.DataFrame:
    """perturbed - original, per group and metric, on the clips both score.

    `unit` (agl.scoring.clusters): what the paired bootstrap resamples and the sign flips
    flip together; clusters are formed over all the paired clips, then each group's taken.
    Minimum support counts clusters as well as clips.

    Positive `diff` in km is a loss; negative `diff` in accuracy is a loss. Rounded per
    quantity (km 3 decimals, shares and p-values 6) so the table's bytes are stable. A group
    with fewer than `min_support` paired clips (a continent of three clips, the speech clips
    of a small subset) keeps its row and n, with `note` "insufficient data (n = k, needs m)"
    and no estimate."""
    cols = ["sample_id", "has_speech", "true_continent", "true_lat", "true_lon", "true_city",
            "true_country", "duration_s", *(m for m, _ in METRICS)]
    joined = perturbed[[c for c in cols if c in perturbed]].merge(
        original[[m for m, _ in METRICS] + ["sample_id"]], on="sample_id", suffixes=("_pert", "_orig")
    )
    joined["cluster"] = cluster_labels(joined, unit)
    rows = []
    for group, part in groups(joined):
        if part.empty:
            continue
        for i, (metric, digits) in enumerate(METRICS):
            r = paired_test(
                part[f"{metric}_pert"],
                part[f"{metric}_orig"],
                metric=metric,
                n_boot=n_boot,
                n_perm=n_perm,
                seed=seed + i,
                min_n=min_support,
                clusters=part["cluster"].to_numpy(),
            )
            rows.append(
                {
                    "group": group,
                    "metric": metric,
                    "n": r.n,
                    "n_clusters": r.n_clusters,
                    "mean_original": round(r.mean_b, digits),
                    "mean_perturbed": round(r.mean_a, digits),
                    "diff": round(r.diff, digits),
                    "ci_lo": round(r.ci_lo, digits),
                    "ci_hi": round(r.ci_hi, digits),
                    "p_value": round(r.p_value, 6),
                    "note": r.note,
                }
            )
    return pd.DataFrame(rows, columns=list(EFFECT_COLUMNS[EFFECT_COLUMNS.index("group"):]))


def read_scores(path: Path) -> pd.DataFrame:
    if not Path(path).exists():
        raise AglError(f"{path}: no scores; run the evaluate stage of that model first")
    return read_whole_csv(path, "re-run the evaluate stage of that model")


@dataclass(frozen=True)
class EffectsConfig:
    """params.yaml `counterfactual:` as the counterfactual stage reads it."""

    models: tuple[str, ...] = ()
    interventions: tuple[str, ...] = ()
    protocol: str = "paper"
    effect_bootstrap: int = knob("counterfactual.effect_bootstrap", BOOTSTRAP)  # paired bootstrap resamples per effect
    permutations: int = knob("counterfactual.permutations", 2000)  # sign-flip permutations per p-value
    seed: int = knob("counterfactual.seed", 0)
    min_support: int = knob("counterfactual.min_support", 10)  # fewer paired clips: n and a note, no estimate
    resampling_unit: str = DEFAULT_UNIT  # what an effect's CI resamples (agl.scoring.clusters)
    # One model's long-audio protocols, paired (issue 45): each a list of runs of one model,
    # the reference first (its first-30-s row, the paper's), e.g. [[gem-first30, gem-whole,
    # gem-random30]]; a long-audio mode is a derived run, as an intervention is.
    long_audio: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        check_fields(self)
        rows = self.long_audio
        if not isinstance(rows, list | tuple) or not all(isinstance(r, list | tuple) and len(r) >= 2
                                                          and all(isinstance(x, str) for x in r) for r in rows):
            raise AglError(f"params.yaml counterfactual.long_audio: {rows!r} is not a list of run lists (the "
                           "reference first, two runs at least); e.g. [[knn-first30, knn]], or [] for none")
        object.__setattr__(self, "long_audio", tuple(tuple(r) for r in rows))
        for name in ("models", "interventions"):  # DVC's matrix would expand text letter by letter
            check_names(getattr(self, name), f"params.yaml counterfactual.{name}", "names",
                        f"counterfactual.{name}: [] for none")
        for name, kind in (("models", tuple), ("interventions", tuple), ("protocol", str),
                           ("effect_bootstrap", int), ("permutations", int), ("seed", int), ("min_support", int)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        object.__setattr__(self, "resampling_unit",
                           parse_unit(self.resampling_unit, "counterfactual.resampling_unit").name)

    @classmethod
    def from_params(cls, section: dict[str, Any] | None, max_resamples: int | None = None,
                    source: str = "params.yaml") -> EffectsConfig:
        """From `counterfactual:` (its other keys belong to perturb@* and listen@*); a count
        past `max_resamples` (evaluate.max_resamples) is one line naming it, before any work."""
        names = {f.name for f in fields(cls)}
        check_params("counterfactual", {k: v for k, v in (section or {}).items() if k in names}, source)
        check_resamples({f"counterfactual.{k}": ((section or {}).get(k, getattr(cls, k)), 1)
                         for k in ("effect_bootstrap", "permutations")}, max_resamples, source)
        return cls(**{k: v for k, v in (section or {}).items() if k in names})


LONG_AUDIO = "long_audio"  # the intervention column of a long-audio comparison's rows


def collect_effects(runs: Path, listen: Path, perturb: Path, config: EffectsConfig,
                    more: list[pd.DataFrame] | None = None) -> pd.DataFrame:
    """Every (model, intervention, level) against the model's run on the original clips, and
    `more` tables of the same columns (one model's long-audio protocols, paired:
    agl.counterfactual.long_audio)."""
    frames = []
    protocol = config.protocol
    for model in config.models:
        original = read_scores(Path(runs) / model / f"scores_{protocol}.csv")
        for name in config.interventions:
            folder = Path(listen) / model / name
            levels = sorted(d for d in folder.iterdir() if d.is_dir()) if folder.is_dir() else []
            if not levels:
                raise AglError(f"{folder}: no runs; run listen@{model}-{name} first")
            for level_dir in levels:
                iv = (read_source(Path(perturb) / name / level_dir.name / "lock.json") or {}).get("intervention") or {}
                table = paired_effects(
                    original,
                    read_scores(level_dir / f"scores_{protocol}.csv"),
                    n_boot=config.effect_bootstrap,
                    n_perm=config.permutations,
                    seed=config.seed,
                    min_support=config.min_support,
                    unit=config.resampling_unit,
                )
                value = iv.get("value")
                table.insert(0, "value", float("nan") if value is None else float(value))
                table.insert(0, "level", level_dir.name)
                table.insert(0, "kind", iv.get("kind", ""))
                table.insert(0, "intervention", name)
                table.insert(0, "model", model)
                frames.append(table)
    frames += list(more or [])
    if not frames:  # no model or no intervention chosen: an empty table with its columns
        return pd.DataFrame(columns=list(EFFECT_COLUMNS))
    with warnings.catch_warnings():  # an all-NaN `value` (ungraded) is a float column as meant
        warnings.simplefilter("ignore", FutureWarning)
        table = pd.concat(frames, ignore_index=True)
    # Many effects are tested per model (interventions x levels x groups x metrics): their
    # p-values are adjusted together (Holm), the family named in each row. A model's
    # long-audio comparisons are a family of their own (another question than listening).
    family = np.where(table["intervention"] == LONG_AUDIO, "its long-audio protocols", "every intervention")
    table["family"] = table["family"].astype(object)
    for (model, what), rows in table.groupby([table["model"], family], sort=False):
        table.loc[rows.index, "p_holm"] = holm(rows["p_value"].to_numpy(dtype=float)).round(6)
        table.loc[rows.index, "family"] = (f"{model}: {what}, level, group and metric "
                                           f"({int(rows['p_value'].notna().sum())} tests)")
    return table


def effects_summary(effects: pd.DataFrame) -> tuple[dict[str, Any], list[str]]:
    """The headline rows (all / speech / non-speech, mean km) keyed model/intervention/level/group,
    and one line per row to print."""
    head = effects[effects["group"].isin(["all", "speech", "non_speech"]) & (effects["metric"] == "distance_km")]
    summary: dict[str, Any] = {}
    lines = []
    for r in head.itertuples(index=False):
        key = f"{r.model}/{r.intervention}/{r.level}/{r.group}"
        if r.note:
            summary[key] = {"n": int(r.n), "insufficient": r.note}
            lines.append(f"{key}: {r.note}")
            continue
        summary[key] = {"n": int(r.n), "delta_km": r.diff, "ci95": [r.ci_lo, r.ci_hi], "p_value": r.p_value}
        lines.append(f"{key}: n={r.n} delta {r.diff:+.1f} km [{r.ci_lo:+.1f}, {r.ci_hi:+.1f}] p={r.p_value:.4f}")
    return summary, lines
