"""The leaderboard: one ranked table per dataset (data version), with CIs and the paper's values.

Runs are ranked only against runs on the same data (the manifest's content hash): a run on the
synthetic demo set and a run on AGL1K are never in one table. Within a dataset, a run that
scored fewer than `full_coverage` of its clips is a subset run: its coverage `n / N` is shown,
it is ranked after the full runs with a note, because its numbers are not comparable to theirs.
A run that rejects many clips (`refusal_note`: its reject rate, any field refused) carries that
rate beside its rank, with a note counting its clips without coordinates: the protocol scores
those at a fixed distance, so its place comes partly from that rule, not from located guesses.
The counts keep their one name each (agl.scoring.metrics.counts): refused, no coordinates,
rejected.
Every "—" is "not applicable" (`agl.scoring.wording`).

A run beside a paper value that was not run under the paper's protocol (its model entry's
`protocol:`, recorded as `run_protocol`; agl.inference.roster) is marked "‡" with a note: its
numbers and the paper's come from two different experiments. A run the provider says was
answered by another model than the one asked, or by more than one (the served-model ledger's
`served_flags` in the run's tracked run_summary.json; agl.predictions.served), is marked "§",
its flags in the `served_flags` column of leaderboard.csv (a column only when a run has them)
and in a note under its table.
"""

from __future__ import annotations

import html
import json
import math
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core import canonical, diskwrite
from agl.dataset.manifest import SYNTHETIC_MARK
from agl.errors import AglError
from agl.scoring.labels import board_columns, label_notes, levels_table
from agl.scoring.marks import (  # noqa: F401  (served_lines, run_flags: the stages' entrance)
    PAPER_COLUMNS,
    PROTOCOL_MARK,
    PROTOCOL_NOTE,
    SERVED_MARK,
    SERVED_NOTE,
    deaf_mark,
    deaf_notes,
    off_protocol,
    run_flags,
    served_flags,
    served_lines,
    served_note,
)
from agl.scoring.protocol_paper import PAPER_REFUSAL_KM
from agl.scoring.protocols import PROTOCOLS
from agl.scoring.wording import NOT_APPLICABLE, NOT_APPLICABLE_LEGEND

COLUMNS = ("distance_error_km", "median_km", "geoscore", "continent_acc", "country_acc",
           "city_acc", "reject_rate", "failure_rate", "within_25km", "within_200km",
           "within_750km", "within_2500km")
COUNTS = ("n_refused", "n_no_coordinates", "n_rejected")
# The paper is silent on runs that mostly refuse. A refusal scores a fixed distance (paper:
# 10,000 km, about what a uniformly random guess averages), so a run refusing everything ranks
# among the baselines without locating anything. At or above this share of refused clips the
# rank shows the refusal rate and a note says so (params leaderboard.refusal_note): one clip in
# ten moves a mean of a few thousand km by several hundred, enough to swap neighbours.
REFUSAL_NOTE_SHARE = 0.1
# Above this share of refused clips a run is not ranked at all (params leaderboard.max_refused):
# listed below the ranked runs with its numbers, because more than half of its mean is the
# rule's fixed distance, not guesses (the demo's langprior refuses all 32 synthetic clips and
# once ranked second). The paper is silent; the authors' published runs refuse far less (the
# Qwen2.5-Omni file: under a third), so no paper row leaves the ranking.
MAX_REFUSED_SHARE = 0.5
# A run with more than this share of its replies cut at the output limit (status `truncated`)
# gets a note naming it and how many (params leaderboard.truncated_note; the paper is silent).
# One clip in a hundred: a budget that cuts more is part of what is being ranked.
TRUNCATED_NOTE_SHARE = 0.01
UNRANKED = "unranked"


RANK_BOOTSTRAP = 1000  # params leaderboard.rank_bootstrap: cluster resamples behind the rank intervals


def collect(metrics_files: list[Path], protocol: str, *, full_coverage: float = 1.0,
            refusal_note: float = REFUSAL_NOTE_SHARE, max_refused: float = MAX_REFUSED_SHARE,
            rank_bootstrap: int = RANK_BOOTSTRAP,
            truncated_note: float = TRUNCATED_NOTE_SHARE) -> pd.DataFrame:
    """One row per run from `metrics.json` files written by the evaluate stages, grouped by data
    version (largest dataset first), full runs before subset runs, then by mean distance.
    `refusal_heavy`: the run refused at least `refusal_note` of its clips; `unranked`: more
    than `max_refused` (listed last, rank empty)."""
    rows, unscored = [], []
    for path in metrics_files:
        doc = json.loads(Path(path).read_text())
        res = doc["protocols"].get(protocol)
        if res is None:  # evaluated under other protocols only: counted below, never silent
            unscored.append((str(doc.get("run", path)), sorted(doc["protocols"])))
            continue
        row: dict[str, Any] = {"run": doc["run"], "model": doc.get("model", doc["run"]),
                               "_scores": str(Path(path).parent / f"scores_{protocol}.csv"),
                               "backend": doc.get("backend", ""), "source": doc.get("source", ""),
                               "paper_name": doc.get("paper_name") or "",
                               "run_protocol": doc.get("run_protocol") or "",
                               "dataset": doc.get("dataset", ""), "n": res["n"],
                               "data_version": doc.get("data_version", ""),
                               "dataset_clips": doc.get("dataset_clips"),
                               "clips_predicted": doc.get("clips_predicted"),
                               # agl.scoring.metrics.counts (absent from a record imported
                               # with its stated numbers only: left empty, never guessed)
                               **{k: res.get(k) for k in COUNTS}}
        # Only where they happened, so a board without either keeps its columns.
        if res.get("n_truncated"):
            row["n_truncated"] = int(res["n_truncated"])
        if doc.get("audio_tags_sent"):
            row["audio_tags_sent"] = True
        cost = doc.get("cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and cost > 0:
            # What a correct country cost at the run's prices (a priced run only).
            correct = (res.get("country_acc") or 0) * res["n"]
            row["usd_per_correct_country"] = cost / correct if correct else None
        flags = run_flags(Path(path))
        if flags:  # agl.predictions.served: only then a column (offline runs name no model)
            row["served_flags"] = "; ".join(flags)
        # The interval is the run's resampling unit's (agl.scoring.clusters); the clip one
        # and Kish's design effect (variance ratio, agl.scoring.design) stand beside it.
        row["n_clusters"] = res.get("n_clusters", res["n"])
        row["median_refused"] = bool(res.get("median_refused", False))  # at the refusal distance
        row["resampling_unit"] = res.get("resampling_unit", "clip")
        for c in COLUMNS:
            row[c] = res.get(c)
            lo, hi = res.get("ci95", {}).get(c, (None, None))
            row[f"{c}_lo"], row[f"{c}_hi"] = lo, hi
            lo, hi = res.get("ci95_clip", res.get("ci95", {})).get(c, (None, None))
            row[f"{c}_clip_lo"], row[f"{c}_clip_hi"] = lo, hi
        for c in ("distance_error_km", "country_acc"):
            row[f"design_effect_{c}"] = res.get("design_effect", {}).get(c, 1.0)
        row.update(board_columns(res))  # labels and the levels from the predicted point
        if res.get("repeats"):  # infer.repeats > 1 (agl.scoring.repeats): only then a column
            rep = res["repeats"]
            row["repeats"] = rep["n_repeats"]
            for c in ("distance_error_km", "country_acc"):
                row[f"{c}_repeat_mean"] = rep["metrics"][c]["mean"]
                row[f"{c}_repeat_std"] = rep["metrics"][c]["std"]
            row["flip_rate"] = rep["flip_rate"]
            row["consensus_country_acc"] = rep["consensus_country_acc"]
        rows.append(row)
        late = res.get("post_cutoff") or {}
        if late.get("n"):  # the clips uploaded after the model's training cutoff (evaluate)
            rows.append(_post_cutoff_row(row, late))
    _no_protocol(unscored, protocol, ranked=len(rows))
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    n_all = pd.to_numeric(frame["dataset_clips"], errors="coerce")
    done = pd.to_numeric(frame["clips_predicted"], errors="coerce").fillna(frame["n"])
    frame["coverage"] = (done / n_all).round(6)
    frame["subset"] = (frame["coverage"] < full_coverage).fillna(False).astype(bool)
    reject = pd.to_numeric(frame["reject_rate"], errors="coerce")
    frame["unranked"] = (reject > max_refused).fillna(False).astype(bool)
    frame["refusal_heavy"] = (reject >= refusal_note).fillna(False).astype(bool)
    if "n_truncated" in frame:
        cut = pd.to_numeric(frame["n_truncated"], errors="coerce").fillna(0)
        frame["truncated_heavy"] = (cut / frame["n"] > truncated_note).astype(bool)
    size = n_all.groupby(frame["data_version"]).transform("max").fillna(0)
    frame = frame.assign(_size=-size).sort_values(
        ["_size", "data_version", "unranked", "subset", "distance_error_km", "run"], kind="stable"
    ).drop(columns="_size").reset_index(drop=True)
    ranked = frame[~frame["unranked"]]
    frame["rank"] = (ranked.groupby("data_version").cumcount() + 1).reindex(frame.index).astype("Int64")
    frame = _with_rank_intervals(frame, rank_bootstrap)
    frame["protocol"] = protocol
    if "served_flags" in frame:  # a fixed place, whichever run has flags
        frame["served_flags"] = frame.pop("served_flags")
    frame["refusal_heavy"] = frame.pop("refusal_heavy")  # leaderboard.csv's column order: last
    return frame


POST_CUTOFF_NOTE = ("A run named \"(uploaded after <date>)\" is the run above it scored only on the "
                    "clips uploaded after its model's training cutoff (the model entry's "
                    "training_cutoff; upload dates from the Archive's item metadata): clips it "
                    "cannot have been trained on. Its n is those clips; its interval resamples "
                    "the same clusters (docs/baselines.md#dates).")


def _post_cutoff_row(row: dict[str, Any], late: dict[str, Any]) -> dict[str, Any]:
    """The leaderboard row of a run's post-cutoff subset (its metrics from `late`)."""
    out = {**row, "run": f"{row['run']} (uploaded after {late['cutoff']})", "n": late["n"],
           "clips_predicted": late["n"], "post_cutoff": late["cutoff"],
           **{k: late.get(k) for k in COUNTS}}
    out["n_clusters"] = late.get("n_clusters", late["n"])
    out["median_refused"] = bool(late.get("median_refused", False))
    for c in COLUMNS:
        out[c] = late.get(c)
        lo, hi = late.get("ci95", {}).get(c, (None, None))
        out[f"{c}_lo"], out[f"{c}_hi"] = lo, hi
        lo, hi = late.get("ci95_clip", late.get("ci95", {})).get(c, (None, None))
        out[f"{c}_clip_lo"], out[f"{c}_clip_hi"] = lo, hi
    for c in ("distance_error_km", "country_acc"):
        out[f"design_effect_{c}"] = late.get("design_effect", {}).get(c, 1.0)
    return out


def _with_rank_intervals(frame: pd.DataFrame, n: int) -> pd.DataFrame:
    """Rank intervals and groups (agl.scoring.ranks) for each data version's ranked full runs
    that have per-clip scores beside their metrics.json; empty for the others (subset runs
    are not ranked against full ones, imported records have no clips)."""
    from agl.scoring.ranks import rank_intervals  # lazy: reads the runs' score tables

    frame = frame.assign(rank_lo=pd.NA, rank_hi=pd.NA, rank_group=pd.NA, rank_shares="", rank_clips=pd.NA)
    for _, rows in frame.groupby("data_version", sort=False):
        mine = rows[~rows["unranked"] & ~rows["subset"] & rows["_scores"].map(lambda p: Path(p).is_file())]
        if len(mine) < 2 or n <= 0:
            continue
        tables = [pd.read_csv(p, usecols=["sample_id", "distance_km", "true_lat", "true_lon"],
                              dtype={"sample_id": str}) for p in mine["_scores"]]
        got = rank_intervals(tables, str(mine["resampling_unit"].iloc[0]), n=n)
        for c in got.columns:
            frame.loc[mine.index, c] = got[c].to_numpy()
    return frame.drop(columns="_scores")


def _no_protocol(unscored: list[tuple[str, list[str]]], protocol: str, *, ranked: int) -> None:
    """Runs without scores under the leaderboard's protocol: an error when no run has them (an
    empty leaderboard is not a result), else a counted warning naming one."""
    if not unscored:
        return
    run, has = unscored[0]
    where = f"{run} has {', '.join(has) or 'no protocol'}"
    if not ranked:
        raise AglError(f"no run was scored under the '{protocol}' protocol ({where}); set "
                       f"leaderboard.protocol to one of evaluate.protocols, or add '{protocol}' "
                       "to evaluate.protocols")
    warnings.warn(f"{len(unscored)} run(s) left out of the '{protocol}' leaderboard: not scored "
                  f"under it (e.g. {where}); add '{protocol}' to evaluate.protocols to rank them",
                  stacklevel=3)


def groups(board: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(header, rows) per data version, in the board's order; rows keep the board's index."""
    if board.empty:
        return []
    if "data_version" not in board:
        return [("", board)]
    out = []
    for version in dict.fromkeys(board["data_version"]):
        rows = board[board["data_version"] == version]
        first = rows.iloc[0]
        label = str(first.get("dataset") or "unknown data")
        clips = first.get("dataset_clips")
        size = f"{int(clips):,} clips" if clips is not None and pd.notna(clips) else ""
        synthetic = label.startswith(SYNTHETIC_MARK)  # its label already gives its size
        plain = label.endswith(" clips")  # an unnamed dataset: its label is only its size
        head = ", ".join(x for x in ("" if plain else label, "" if synthetic else size,
                                     f"data version {str(version)[:12]}" if version else "") if x)
        if plain:
            head = f"AGL1K-format dataset: {head}"
        if synthetic:
            head += " — scores on it say nothing about a model"
        out.append((head, rows))
    return out


SUBSET_NOTE = ("Subset runs (marked *) scored fewer clips than the dataset holds (n / N); their "
               "numbers are not comparable to full runs and they are ranked after them.")


# Runs `agl import` wrote from Every Eval Ever records (agl.interchange.eee_import): their
# metrics.json `source` starts so, their run is named eee/<organization>/<model>.
IMPORTED_SOURCE = "EEE record by "
IMPORTED_NOTE = ("Runs named eee/<organization>/<model> come from Every Eval Ever records of other "
                 "evaluators (agl import; docs/interchange.md): scored here by this project's "
                 "protocols where their per-clip rows carry places, else ranked as they state.")


def attach_paper(board: pd.DataFrame, paper: pd.DataFrame | None) -> pd.DataFrame:
    """Add the paper's reported values where a run names a paper model (`paper_name`)."""
    board = board.copy()
    for c in PAPER_COLUMNS:
        board[f"paper_{c}"] = math.nan
    if paper is None or board.empty:
        return board
    by_name = {str(m).strip().lower(): r for m, r in paper.set_index("model").iterrows()}
    for i, name in board["paper_name"].items():
        r = by_name.get(str(name).strip().lower())
        if r is not None:
            for c in PAPER_COLUMNS:
                if c in r and pd.notna(r[c]):
                    board.at[i, f"paper_{c}"] = float(r[c])
    return board


def _cell(v: Any, digits: int) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return NOT_APPLICABLE  # a field the run never attempts (a coordinates-only baseline)
    return f"{v:.{digits}f}"


_WITH_CI = re.compile(r"^(\S+) (\[[^\]]*\])$")


def html_cell(text: str) -> str:
    """A cell of the HTML table: an estimate's interval (`8401.11 [6881.38, 9924.40]`) on its
    own line under the value, so the column is as wide as the interval, not as both."""
    m = _WITH_CI.match(text)
    if m is None:  # `1442 / 1444` stays on one line
        return html.escape(text).replace(" / ", "\u00a0/\u00a0")
    return f"{html.escape(m.group(1))}<span class='ci'>{html.escape(m.group(2))}</span>"


def _with_ci(row: pd.Series, c: str, digits: int) -> str:
    v = _cell(row[c], digits)
    # bounds in the digits their Monte-Carlo noise supports: whole km (docs/metrics.md#resamples)
    bound = 0 if c.endswith("_km") else digits
    lo, hi = _cell(row[f"{c}_lo"], bound), _cell(row[f"{c}_hi"], bound)
    return f"{v} [{lo}, {hi}]" if v != NOT_APPLICABLE and lo != NOT_APPLICABLE else v


def _flag(row: pd.Series, name: str) -> bool:
    return str(row.get(name, False)).lower() == "true"


def _rejected(row: pd.Series) -> str:
    """The share of clips a run rejected (any field refused), as its rank shows it."""
    return f"{float(row['reject_rate']):.0%} rejected"


def render_rows(board: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The header and text cells of one dataset's ranked table (rank, run, n / N, km with CI,
    accuracies beside the paper's). A paper column is blank for a run without a counterpart in
    the paper, "—" where the paper gives no value (its random baseline has no accuracies); a
    table where no run has a counterpart has no paper columns (the demo's)."""
    head = ["#", "run", "model", "n / N", "distance km [95% CI]", "paper km", "median km",
            "GeoScore", "continent", "paper", "country", "paper", "city", "paper", "reject",
            "clusters", "design effect (km, country)", "rank 95% [group]"]
    paper_at = (5, 9, 11, 13)  # the paper's columns in `head`
    rows = []
    any_paper = False
    for i, r in board.iterrows():
        if _flag(r, "unranked"):
            rank = UNRANKED
        else:
            rank = str(int(r["rank"]) if "rank" in r and pd.notna(r["rank"]) else i + 1)
        if _flag(r, "refusal_heavy"):
            rank += f" ({_rejected(r)})"
        run = f"{r['run']} *" if _flag(r, "subset") else str(r["run"])
        if off_protocol(r):
            run += " ‡"
        if served_flags(r):
            run += f" {SERVED_MARK}"
        if deaf_mark(r):
            run += f" {deaf_mark(r)}"
        clips = r.get("dataset_clips")
        done = r.get("clips_predicted")
        n = str(int(done if done is not None and pd.notna(done) else r["n"]))
        coverage = f"{n} / {int(clips)}" if clips is not None and pd.notna(clips) else n
        unit = str(r.get("resampling_unit") or "clip") if pd.notna(r.get("resampling_unit")) else "clip"
        clusters = r.get("n_clusters")
        clusters = f"{int(clusters)} ({unit})" if clusters is not None and pd.notna(clusters) else ""
        in_paper = any(pd.notna(r.get(f"paper_{c}")) for c in PAPER_COLUMNS)
        any_paper |= in_paper
        paper = {c: _cell(r.get(f"paper_{c}"), 2) if in_paper else "" for c in PAPER_COLUMNS}
        rows.append([
            rank, run, r["model"], coverage, _with_ci(r, "distance_error_km", 2),
            paper["distance_error_km"], "refused" if _flag(r, "median_refused") else _cell(r["median_km"], 2),
            _cell(r["geoscore"], 1), _with_ci(r, "continent_acc", 2),
            paper["continent_acc"], _with_ci(r, "country_acc", 2),
            paper["country_acc"], _with_ci(r, "city_acc", 2),
            paper["city_acc"], _cell(r["reject_rate"], 2), clusters,
            f"{_cell(r.get('design_effect_distance_error_km'), 2)}, "
            f"{_cell(r.get('design_effect_country_acc'), 2)}", _rank_cell(r),
        ])
    if not any_paper:
        keep = [k for k in range(len(head)) if k not in paper_at]
        head, rows = [head[k] for k in keep], [[row[k] for k in keep] for row in rows]
    if "usd_per_correct_country" in board and board["usd_per_correct_country"].notna().any():
        head = [*head, "USD per correct country"]
        rows = [[*row, _cell(r.get("usd_per_correct_country"), 4)
                 if pd.notna(r.get("usd_per_correct_country")) else ""]
                for row, (_, r) in zip(rows, board.iterrows(), strict=True)]
    if "repeats" in board and board["repeats"].notna().any():
        head = [*head, "repeats: km, country (mean ± std); flips"]
        rows = [[*row, _repeat_cell(r)] for row, (_, r) in zip(rows, board.iterrows(), strict=True)]
    return head, rows


def _rank_cell(r: pd.Series) -> str:
    """`1-2 [1]`: the run's 95% rank interval and its group (agl.scoring.ranks); "—" where it
    has none (a subset run, an unranked one, a run without per-clip scores)."""
    lo, hi, group = r.get("rank_lo"), r.get("rank_hi"), r.get("rank_group")
    if lo is None or pd.isna(lo):
        return NOT_APPLICABLE
    span = f"{int(lo)}" if int(lo) == int(hi) else f"{int(lo)}-{int(hi)}"
    return f"{span} [{int(group)}]"


def _repeat_cell(r: pd.Series) -> str:
    """`n×: km mean ± std, country mean ± std; flip rate` for a run asked several times."""
    n = r.get("repeats")
    if n is None or pd.isna(n):
        return ""
    km = f"{_cell(r['distance_error_km_repeat_mean'], 1)} ± {_cell(r['distance_error_km_repeat_std'], 1)}"
    acc = f"{_cell(r['country_acc_repeat_mean'], 2)} ± {_cell(r['country_acc_repeat_std'], 2)}"
    return f"{int(n)}×: {km}, {acc}; {_cell(r['flip_rate'], 2)}"


def _refusal_rule(protocol: str) -> str:
    if protocol == "paper":
        return (f"the paper protocol scores a clip without coordinates as "
                f"{PAPER_REFUSAL_KM:,.0f} km (the paper's rule)")
    if protocol == "strict":
        return ("the strict protocol scores a clip without coordinates as the farthest possible "
                "error (params evaluate.strict_refusal_km)")
    return f"the {protocol} protocol scores a clip without coordinates at a fixed distance"


def _count(row: pd.Series, key: str) -> int | None:
    v = pd.to_numeric(row.get(key), errors="coerce")
    return None if pd.isna(v) else int(v)


def _rejected_count(row: pd.Series) -> str:
    """"<run> rejected 448 of 1442 clips, 385 of them without coordinates": each count under
    its own name (the second is left out where the run's metrics.json does not hold it)."""
    n = int(row["n"])
    rejected = _count(row, "n_rejected")
    rejected = round(float(row["reject_rate"]) * n) if rejected is None else rejected
    text = f"{row['run']} rejected {rejected} of {n} clips"
    none = _count(row, "n_no_coordinates")
    return text if none is None else f"{text}, {none} of them without coordinates"


def _cut_and_tagged_notes(rows: pd.DataFrame) -> list[str]:
    """Runs whose replies were often cut at the output limit, and runs whose audio went out
    with the files' container tags (a tag can name the place: docs/inference.md)."""
    notes = []
    if "truncated_heavy" in rows:
        cut = [f"{r['run']} ({int(r['n_truncated'])} of {int(r['n'])})" for _, r in rows.iterrows()
               if _flag(r, "truncated_heavy")]
        if cut:
            rule = ("scored from what the cut reply holds, as the authors' parser read it"
                    if str(rows["protocol"].iloc[0]) == "paper" else "each a failure")
            notes.append(f"Replies cut at the output limit (status truncated; more than the share "
                         f"leaderboard.truncated_note of the run's clips): {'; '.join(cut)}: "
                         f"{rule}. A larger output limit (or a thinking budget below it) may "
                         "change these runs' numbers.")
    if "audio_tags_sent" in rows:
        tagged = [str(r["run"]) for _, r in rows.iterrows() if _flag(r, "audio_tags_sent")]
        if tagged:
            notes.append(f"Audio sent with its files' container tags (ID3 and the like, which "
                         f"can name the place, the date and the coordinates): {', '.join(tagged)}; "
                         "every other run received the sound alone (docs/inference.md#what-"
                         "reaches-a-model).")
    return notes


def table_notes(rows: pd.DataFrame) -> list[str]:
    """The notes under one dataset's ranked table: subset runs, refusal-heavy runs, runs off
    the paper's protocol or served by another model than asked, "—"."""
    notes = []
    if "subset" in rows and rows["subset"].astype(str).str.lower().eq("true").any():
        notes.append(SUBSET_NOTE)
    rule = _refusal_rule(str(rows["protocol"].iloc[0]) if "protocol" in rows and len(rows) else "paper")
    out = [_flag(r, "unranked") for _, r in rows.iterrows()]
    heavy = [_flag(r, "refusal_heavy") and not u for (_, r), u in zip(rows.iterrows(), out, strict=True)]
    ranked, unranked = rows[heavy], rows[out]
    if not unranked.empty:
        # An unranked run has no rank: its note speaks of its mean and where it is listed.
        runs = "; ".join(_rejected_count(r) for _, r in unranked.iterrows())
        notes.append(f"{UNRANKED.capitalize()}: {', '.join(map(str, unranked['run']))}: rejected "
                     "more than the share leaderboard.max_refused of its clips "
                     f"({runs}): {rule}; listed with its numbers below the ranked runs, not ranked.")
    if not ranked.empty:
        runs = "; ".join(_rejected_count(r) for _, r in ranked.iterrows())
        notes.append(f"A rank marked \"(x% rejected)\" belongs to a run that rejected many of "
                     f"its clips (refused at least one field; {runs}): {rule}, so that rank "
                     "comes in part from the rule, not from located guesses. A run refusing "
                     "every clip averages that distance whatever it heard; under the paper's "
                     "rule, about what uniformly random guesses score.")
    off = [str(r["run"]) + (f" ({r['run_protocol']})" if r.get("run_protocol") else
                            " (no protocol stated)")
           for _, r in rows.iterrows() if off_protocol(r)]
    if off:
        notes.append(PROTOCOL_NOTE.format(runs="; ".join(off)))
    notes += _cut_and_tagged_notes(rows)
    served = {r["run"]: served_flags(r) for _, r in rows.iterrows() if served_flags(r)}
    if served:
        notes.append(served_note(served))
    notes.extend(deaf_notes(rows))
    if "post_cutoff" in rows and rows["post_cutoff"].notna().any():
        notes.append(POST_CUTOFF_NOTE)
    notes.extend(label_notes(rows))
    if "source" in rows and rows["source"].astype(str).str.startswith(IMPORTED_SOURCE).any():
        notes.append(IMPORTED_NOTE)
    if any(NOT_APPLICABLE in c for row in render_rows(rows)[1] for c in row):
        notes.append(NOT_APPLICABLE_LEGEND)
    if "repeats" in rows and rows["repeats"].notna().any():
        notes.append("A run asked several times (params.yaml infer.repeats) shows each headline "
                     "metric's mean ± standard deviation over its repeats, and its flip rate: the "
                     "share of clips whose country is not the same in every repeat (sampling "
                     "noise no clip interval shows; docs/metrics.md#repeats). Its rank and "
                     "interval are repeat 0's.")
    if "rank_lo" in rows and rows["rank_lo"].notna().any():
        notes.append("rank 95% [group]: the 2.5th to 97.5th percentile of each full run's rank over "
                     "cluster resamples of the clips all of them score (the same clusters drawn "
                     "for every run), and its group: runs whose rank intervals reach the group "
                     "leader's worst rank cannot be told apart (docs/metrics.md#ranks; each "
                     "rank's share of resamples is in leaderboard.csv, rank_shares). Subset runs "
                     "are not ranked against full ones.")
    if "n_clusters" in rows:
        notes.append("95% intervals resample whole clusters of clips (the 'clusters' column: how "
                     "many, under which unit; docs/metrics.md#clusters). The design effect is "
                     "Kish's: the variance of the estimate under the clusters over its variance "
                     "were the clips independent, so n clips carry the information of n / deff "
                     "(docs/metrics.md#design-effect). The clip intervals are in "
                     "leaderboard.csv (*_clip_lo, *_clip_hi).")
    return notes


def _levels(rows: pd.DataFrame, md: list[str], body: list[str], ident: str) -> tuple[list[str], list[str]]:
    """The second table under a dataset's ranking: accuracy at every level, by name and from
    the predicted point (agl.scoring.labels)."""
    head, cells = levels_table(rows)
    title = "Accuracy at every level, by name and from the predicted point (OSV-5M's levels)"
    md = md + [f"{title}:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(r) + " |" for r in cells] + [""]
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in cells)
    body = body + [f"<p class='note'>{html.escape(title)}:</p><div class='scroll'><table id='{ident}' "
                   f"class='leaderboard'><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table></div>"]
    return md, body


def write(board: pd.DataFrame, out_dir: Path, *, protocol: str, note: str = "") -> list[Path]:
    """leaderboard.csv (every run, with its data version and rank within it), and .md / .html
    with one ranked table per dataset."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path, html_path = (out_dir / f"leaderboard.{e}" for e in ("csv", "md", "html"))
    canonical.write_csv(board, csv_path)
    md = [f"# Leaderboard ({protocol} protocol)", ""]
    if note:
        md += [note, ""]
    body = []
    parts = groups(board)
    for k, (header, rows) in enumerate(parts):
        head, cells = render_rows(rows)
        if header:
            md += [f"## {header}", ""]
            body.append(f"<h2>{html.escape(header)}</h2>")
        md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        md += ["| " + " | ".join(r) + " |" for r in cells]
        notes = table_notes(rows)
        for line in notes:
            md += ["", line]
        md.append("")
        th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{html_cell(c)}</td>" for c in r) + "</tr>" for r in cells)
        ident = "leaderboard" if k == 0 else f"leaderboard-{k + 1}"
        # Fits a laptop's 1,280 px (intervals under their value, headers and names wrapped);
        # in a scrolling box all the same, so the page never widens past the window.
        body.append(f"<div class='scroll'><table id='{ident}' class='leaderboard'><thead><tr>{th}</tr></thead>"
                    f"<tbody>{trs}</tbody></table></div>")
        body += [f"<p class='note'>{html.escape(line)}</p>" for line in notes]
        if "country_point_acc" in rows and rows["country_point_acc"].notna().any():
            md, body = _levels(rows, md, body, f"{ident}-levels")
    if board.empty:
        md.append("(no evaluated runs)")
    diskwrite.write_text(md_path, "\n".join(md).rstrip("\n") + "\n")
    diskwrite.write_text(
        html_path,
        "<!doctype html><meta charset='utf-8'><title>AGL1K leaderboard</title>"
        # the report's leaderboard style: names left, numbers right, the header shaded
        "<style>body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
        "table{border-collapse:collapse;font-size:13px}th{background:#f3f3f3}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}"
        "td:nth-child(-n+3),th:nth-child(-n+3){text-align:left}"
        # at a laptop's width (issue 50: 13 columns scrolled sideways at 1,280 px): headers and
        # the names wrap, and an interval sits under its value
        "table.leaderboard td,table.leaderboard th{white-space:normal;padding:3px 4px}th{vertical-align:bottom}"
        "span.ci{display:block;font-size:11px;color:#555;white-space:nowrap}"
        "div.scroll{overflow-x:auto;max-width:100%}p.note{max-width:70em}</style>"
        f"<h1>Leaderboard ({html.escape(protocol)} protocol)</h1>"
        + (f"<p>{html.escape(note)}</p>" if note else "")
        + "".join(body),
    )
    return [csv_path, md_path, html_path]


def build(files: list[Path], cfg: dict[str, Any], *, base_url: str, cache_dir: str | Path,
          limits: Any) -> tuple[pd.DataFrame, str]:
    """The leaderboard stage's table: every run's metrics.json (`files`) ranked under params
    `leaderboard:` (`cfg`), with the paper's own values where a run names its paper model.
    Those come from the authors' README under `base_url` (bounded by `limits`), else from the
    copy agl ships; the returned note says when the copy was used."""
    from agl.dataset.paper import fetch, read_paper_leaderboard, resolve  # only with a paper run
    from agl.dataset.sources import paper_values  # (as above)

    if not isinstance(cfg["protocol"], str) or cfg["protocol"] not in PROTOCOLS:
        raise AglError(f"params.yaml leaderboard.protocol: {cfg['protocol']!r} is not a protocol; "
                       f"choose one of {', '.join(PROTOCOLS)}")
    from agl.core.checks import check_resamples, check_value  # (as above)

    check_value("rank_bootstrap", cfg.get("rank_bootstrap", RANK_BOOTSTRAP), "params.yaml leaderboard",
                rule="count0", example=str(RANK_BOOTSTRAP))
    check_resamples({"leaderboard.rank_bootstrap": (cfg.get("rank_bootstrap", RANK_BOOTSTRAP), 0)}, None)
    board = collect(files, cfg["protocol"], full_coverage=float(cfg.get("full_coverage", 1.0)),
                    refusal_note=float(cfg.get("refusal_note", REFUSAL_NOTE_SHARE)),
                    max_refused=float(cfg.get("max_refused", MAX_REFUSED_SHARE)),
                    rank_bootstrap=int(cfg.get("rank_bootstrap", RANK_BOOTSTRAP)),
                    truncated_note=float(cfg.get("truncated_note", TRUNCATED_NOTE_SHARE)))
    if board.empty or not (board["paper_name"] != "").any():
        return attach_paper(board, None), ""
    try:
        url = resolve(base_url, cfg["paper_values"])
        src = fetch(url, cache_dir, limits=limits,
                    url_from="paper.base_url and leaderboard.paper_values in params.yaml")
        return attach_paper(board, read_paper_leaderboard(src)), ""
    except AglError as exc:
        # A mirror without the authors' README: the paper's numbers shipped with agl.
        note = (f"paper values from agl's shipped copy (src/agl/data/paper_values.csv), "
                f"because {exc}")
        print(f"warning: {note}", file=sys.stderr)
        return attach_paper(board, paper_values()), note
