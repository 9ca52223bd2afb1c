"""The leaderboard's tables as text: one dataset's ranked rows and the notes under them.

agl.scoring.leaderboard collects and ranks the runs and writes the files; this module turns one
dataset's ranked rows into cells (rank, run and its marks, n / N, values with their intervals,
the paper's beside them) and into the notes that explain those marks.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

import pandas as pd

from agl.scoring.labels import label_notes, levels_table
from agl.scoring.marks import (
    PAPER_COLUMNS,
    PROTOCOL_NOTE,
    SERVED_MARK,
    deaf_mark,
    deaf_notes,
    off_protocol,
    served_flags,
    served_note,
)
from agl.scoring.protocol_paper import PAPER_REFUSAL_KM
from agl.scoring.wording import NOT_APPLICABLE, NOT_APPLICABLE_LEGEND

UNRANKED = "unranked"


POST_CUTOFF_NOTE = ("A run named \"(uploaded after <date>)\" is the run above it scored only on the "
                    "clips uploaded after its model's training cutoff (the model entry's "
                    "training_cutoff; upload dates from the Archive's item metadata): clips it "
                    "cannot have been trained on. Its n is those clips; its interval resamples "
                    "the same clusters (docs/baselines.md#dates).")


SUBSET_NOTE = ("Subset runs (marked *) scored fewer clips than the dataset holds (n / N); their "
               "numbers are not comparable to full runs and they are ranked after them.")


# Runs `agl import` wrote from Every Eval Ever records (agl.interchange.eee_import): their
# metrics.json `source` starts so, their run is named eee/<organization>/<model>.
IMPORTED_SOURCE = "EEE record by "
IMPORTED_NOTE = ("Runs named eee/<organization>/<model> come from Every Eval Ever records of other "
                 "evaluators (agl import; docs/interchange.md): scored here by this project's "
                 "protocols where their per-clip rows carry places, else ranked as they state.")


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


def mean_refused(row: pd.Series) -> bool:
    """Every clip of the run was scored at the protocol's fixed distance for no coordinates
    (the demo's langprior: 32 of 32): its mean is that distance, no distance the run gave, and
    reads "refused" as such a median does; leaderboard.csv keeps the number."""
    n, none = pd.to_numeric(row.get("n"), errors="coerce"), pd.to_numeric(row.get("n_no_coordinates"), errors="coerce")
    return bool(pd.notna(n) and pd.notna(none) and n > 0 and none == n)


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
            rank, run, r["model"], coverage,
            "refused" if mean_refused(r) else _with_ci(r, "distance_error_km", 2),
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
    if "hears" in rows:  # long-audio protocols (issue 45)
        heard = [f"{r['run']}: {r['hears']}" for _, r in rows.iterrows() if isinstance(r["hears"], str)]
        if heard:
            notes.append(f"Long-audio protocols: {'; '.join(heard)}; every other run sent each whole "
                         "file as its backend takes it (docs/inference.md#long-audio). One model's "
                         "protocols, paired on the same clips by site and by clip length: the "
                         "report's counterfactual section (counterfactual.long_audio).")
    return notes


def _tie_notes(rows: pd.DataFrame) -> list[str]:
    """One note naming the runs that share a rank (an equal mean distance: competition
    ranking, agl.scoring.leaderboard), so "1, 1, 3" reads as meant, not as a typo."""
    if "rank" not in rows:
        return []
    ranks = pd.to_numeric(rows["rank"], errors="coerce")
    shared = [", ".join(map(str, rows.loc[ranks == k, "run"])) for k in sorted(ranks[ranks.duplicated()].unique())]
    if not shared:
        return []
    return [f"Runs with an equal mean distance share a rank and the next run takes its place in the "
            f"count (\"1, 1, 3\", competition ranking; docs/metrics.md#ranks): {'; '.join(shared)}."]


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
    notes += _tie_notes(rows)
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


def levels_tables(rows: pd.DataFrame, md: list[str], body: list[str], ident: str) -> tuple[list[str], list[str]]:
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
