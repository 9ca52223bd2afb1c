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
import sys
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core import canonical, diskwrite
from agl.dataset.manifest import SYNTHETIC_MARK
from agl.errors import AglError
from agl.scoring.labels import board_columns
from agl.scoring.leaderboard_table import html_cell, levels_tables, render_rows, table_notes
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
    run_hearing,
    served_flags,
    served_lines,
    served_note,
)
from agl.scoring.protocols import PROTOCOLS

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
        hears = run_hearing(Path(path))
        if hears:  # a long-audio protocol (issue 45): only then a column
            row["hears"] = hears
        # The interval is the run's resampling unit's (agl.scoring.clusters); the clip one
        # and Kish's design effect (variance ratio, agl.scoring.design) stand beside it.
        row.update(_result_cells(res, unit=res.get("resampling_unit", "clip")))
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
    frame["rank"] = _competition_ranks(frame)
    frame = _with_rank_intervals(frame, rank_bootstrap)
    frame["protocol"] = protocol
    if "served_flags" in frame:  # a fixed place, whichever run has flags
        frame["served_flags"] = frame.pop("served_flags")
    frame["refusal_heavy"] = frame.pop("refusal_heavy")  # leaderboard.csv's column order: last
    return frame


def _competition_ranks(frame: pd.DataFrame) -> pd.Series:
    """Each ranked row's place in its data version (the frame sorted as the board shows it;
    subset runs after full ones), runs with an equal mean distance sharing the better place and
    the next run taking its place in the count: competition ranking, "1, 1, 3", as benchmark
    tables rank ties (docs/metrics.md#ranks). Equal means exact equality of the metric, and
    only between runs of one kind (a subset run never ties a full one: not comparable); a run
    without a mean ties nothing. Unranked runs have no rank."""
    ranked = frame[~frame["unranked"]]
    place = ranked.groupby("data_version", sort=False).cumcount() + 1
    km = pd.to_numeric(ranked["distance_error_km"], errors="coerce")
    # the sort puts equal means next to each other: a tie takes the first of them's place
    tie = ((ranked["data_version"] == ranked["data_version"].shift())
           & (ranked["subset"] == ranked["subset"].shift()) & km.notna() & (km == km.shift()))
    place = place.where(~tie).ffill().astype(int)
    return place.reindex(frame.index).astype("Int64")


def _post_cutoff_row(row: dict[str, Any], late: dict[str, Any]) -> dict[str, Any]:
    """The leaderboard row of a run's post-cutoff subset (its metrics from `late`)."""
    out = {**row, "run": f"{row['run']} (uploaded after {late['cutoff']})", "n": late["n"],
           "clips_predicted": late["n"], "post_cutoff": late["cutoff"],
           **{k: late.get(k) for k in COUNTS}}
    out.update(_result_cells(late))  # the run's resampling unit stands
    return out


def _result_cells(res: dict[str, Any], *, unit: str | None = None) -> dict[str, Any]:
    """A row's metric cells from one metrics.json result (a run's or its post-cutoff subset's),
    in leaderboard.csv's column order: clusters, the median at the refusal distance, the
    resampling unit (where given), each metric with its interval under that unit and the clip
    one, Kish's design effects."""
    cells: dict[str, Any] = {"n_clusters": res.get("n_clusters", res["n"]),
                             "median_refused": bool(res.get("median_refused", False))}
    if unit is not None:
        cells["resampling_unit"] = unit
    for c in COLUMNS:
        cells[c] = res.get(c)
        cells[f"{c}_lo"], cells[f"{c}_hi"] = res.get("ci95", {}).get(c, (None, None))
        clip = res.get("ci95_clip", res.get("ci95", {}))
        cells[f"{c}_clip_lo"], cells[f"{c}_clip_hi"] = clip.get(c, (None, None))
    for c in ("distance_error_km", "country_acc"):
        cells[f"design_effect_{c}"] = res.get("design_effect", {}).get(c, 1.0)
    return cells


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
            md, body = levels_tables(rows, md, body, f"{ident}-levels")
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
    from agl.core.checks import check_params, check_resamples  # (as above)

    check_params("leaderboard", cfg)  # every share and count by its rule in agl.core.checks.PARAMS
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
