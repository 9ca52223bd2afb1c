"""The HTML pieces every section of the report shares: numbers, tables, figures and ids.

Used by the page (`agl.report.page`) and every section of `agl.report.sections`. Every text is
escaped here, once.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from agl.report.plots import NoData
from agl.scoring.wording import NOT_APPLICABLE, NOT_APPLICABLE_LEGEND, withheld


def number(v: Any, digits: int) -> str:
    """A float with thousands separators and `digits` decimals; "" for None or NaN."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{v:,.{digits}f}" if isinstance(v, float) else str(v)


def with_ci(row: pd.Series, col: str, digits: int) -> str:
    """`row[col]` with its 95% interval (`<col>_lo`, `<col>_hi`) as "v [lo, hi]" where known."""
    v = number(row.get(col), digits)
    lo, hi = number(row.get(f"{col}_lo"), digits), number(row.get(f"{col}_hi"), digits)
    return f"{v} [{lo}, {hi}]" if v and lo else v


class Html(str):
    """A table cell that is already HTML (built from escaped parts): not escaped again."""


Cell = str | tuple[str, int, str]  # text (escaped unless `Html`), or (text, colspan, CSS class)


def table(head: list[str], rows: list[list[Cell]], table_id: str = "") -> str:
    """An HTML table of text cells (escaped unless `Html`), with an optional id. A cell may be a tuple
    (text, colspan, class): one cell across several columns (e.g. a whole row withheld)."""
    ident = f" id='{html.escape(table_id)}'" if table_id else ""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)

    def td(c: Cell) -> str:
        if isinstance(c, tuple):
            text, span, cls = c
            attrs = (f" colspan='{span}'" if span > 1 else "") + (f" class='{cls}'" if cls else "")
            return f"<td{attrs}>{html.escape(text)}</td>"
        return f"<td>{c if isinstance(c, Html) else html.escape(c)}</td>"

    body = "".join("<tr>" + "".join(td(c) for c in r) + "</tr>" for r in rows)
    # Cells do not wrap (page CSS); a table wider than the page scrolls in its own box.
    return (f"<div class='scroll'><table{ident}><thead><tr>{th}</tr></thead><tbody>{body}"
            "</tbody></table></div>")


def frame_table(frame: pd.DataFrame, table_id: str = "", digits: int = 3) -> str:
    """A DataFrame as an HTML table (a named index becomes the first column)."""
    frame = frame.reset_index() if frame.index.name else frame
    rows = [[number(v, digits) if isinstance(v, float) else str(v) for v in r]
            for r in frame.itertuples(index=False)]
    return table([str(c) for c in frame.columns], rows, table_id)


def gap_cell(text: str, span: int = 1) -> tuple[str, int, str]:
    """A cell that holds no estimate: "—" (class na) or the insufficient-data wording."""
    return (text, span, "na" if text == NOT_APPLICABLE else "insufficient")


# A breakdown's estimates: header, column, the column of the n behind it, digits, with a CI.
ESTIMATES = (("mean km [95% CI]", "mean_km", "n_km", 1, True),
             ("median km", "median_km", "n_km", 1, False),
             ("continent acc", "continent_acc", "continent_n", 3, True),
             ("country acc", "country_acc", "country_n", 3, True),
             ("city acc", "city_acc", "city_n", 3, True),
             ("reject rate", "reject_rate", "n", 3, True),
             ("failure rate", "failure_rate", "n", 3, True))


def breakdown_legend(min_n: int) -> str:
    """Said once above the breakdown tables (and the birds tables) of the report."""
    return ("Each estimate is over its row's n clips unless its column header or its cell "
            f"gives another n (the clips where that metric is scored). {NOT_APPLICABLE_LEGEND} "
            f"An estimate on fewer than {min_n} clips, clusters or effective clusters (Kish's "
            "(sum m)^2 / sum m^2: what clusters of unequal sizes are worth) is withheld as "
            f"\"insufficient data (n = k, needs {min_n})\" (params.yaml report.min_support), "
            "said once across the columns it covers.")


def explore_href(base: str, run: str, breakdown: str, group: str) -> str | None:
    """The clip explorer's URL for a breakdown row's clips (its filter syntax:
    agl/explore/static/filters.js), sorted by this run's error; None where no filter fits."""
    from urllib.parse import urlencode

    if not base or (breakdown == "country" and group.startswith("other (")):
        return None
    pick = {"all": [], "speech": [("speech", "yes" if group == "speech" else "no")],
            "category (non-speech)": [("speech", "no"), ("cat", group)],
            "continent": [("continent", group)], "country": [("country", group)]}.get(breakdown)
    return None if pick is None else f"{base}#{urlencode([*pick, ('sort', f'run:{run}')])}"


def breakdown_table(frame: pd.DataFrame, table_id: str = "", min_n: int = 1,
                    link: Callable[[str, str], str | None] | None = None) -> str:
    """A breakdown (one row per group: n, distance and accuracies with CIs) as HTML.

    The n behind an estimate is said once: not at all where it is the row's n (the n
    column), in the column header where it is one other number for the whole column, in the
    cell only where neither holds. An estimate on no scored clip reads "—" (not applicable),
    on fewer than `min_n` "insufficient data (n = k, needs m)" (`agl.scoring.wording`);
    neighbouring estimates withheld for the same reason share one cell (a whole row: one).
    `link(breakdown, group)`: where a group's name links to (None: plain text)."""
    if frame.empty:  # e.g. no non-speech clip holds a sound category
        return table(["group", "n", *(label for label, *_ in ESTIMATES)], [], table_id)
    ns = {col: frame[n_col].astype(int).to_numpy() for _, col, n_col, _, _ in ESTIMATES}
    row_n = frame["n"].astype(int).to_numpy()
    # Clusters (the report's resampling unit): shown beside n; support is counted in both.
    clusters = frame["n_clusters"].astype(int).to_numpy() if "n_clusters" in frame else row_n
    # Support is counted in Kish's effective clusters where known: 49 clusters of which one
    # holds most clips are worth about 3 (agl.scoring.design).
    effective = (frame["n_effective_clusters"].astype(float).to_numpy() if "n_effective_clusters" in frame
                 else clusters.astype(float))
    head, where = ["group", "n", *(["clusters"] if "n_clusters" in frame else [])], {}
    for label, col, _, _, _ in ESTIMATES:
        shown = ns[col] >= max(min_n, 1)  # the cells that print an estimate
        if (ns[col][shown] == row_n[shown]).all():
            where[col] = "row"
            head.append(label)
        elif len(set(ns[col][shown])) == 1:
            where[col] = "header"
            head.append(f"{label} (n = {int(ns[col][shown][0]):,})")
        else:
            where[col] = "cell"
            head.append(label)
    rows = []
    for i, (_, r) in enumerate(frame.iterrows()):
        cells: list[Cell] = []
        for _, col, _, digits, ci in ESTIMATES:
            n = int(ns[col][i])
            gap = withheld(n, min_n) or (withheld(int(clusters[i]), min_n, " clusters")
                                         if n else None) or (
                withheld(int(effective[i]), min_n, f" effective clusters of {int(clusters[i])}")
                if n and "n_effective_clusters" in frame else None)
            if gap is not None:
                cells.append(gap_cell(gap))
                continue
            value = with_ci(r, col, digits) if ci else number(r.get(col), digits)
            if col in ("median_km", "mean_km") and _refused(r, col):
                value = "refused"  # the protocol's fixed distance, not a distance the run gave
            if where[col] == "cell" and n != row_n[i]:
                value += f" (n = {n:,})"
            cells.append(value)
        shown = (f"{int(clusters[i]):,} ({effective[i]:.1f} effective)" if "n_effective_clusters" in frame
                 else f"{int(clusters[i]):,}")
        counts = [f"{int(r['n']):,}", *([shown] if "n_clusters" in frame else [])]
        rows.append([_group_cell(r, link), *counts, *_merge_gaps(cells)])
    return table(head, rows, table_id)


def _refused(r: pd.Series, col: str) -> bool:
    """The group's median is the protocol's fixed distance for clips without coordinates, and
    for the mean every clip is (every resample's mean is that distance): no distance the run
    gave, so the cell reads "refused" (the breakdown CSV keeps the numbers)."""
    if str(r.get("median_refused")).lower() != "true":
        return False
    return col == "median_km" or r.get("mean_km_lo") == r.get("mean_km_hi") == r.get("median_km")


def _group_cell(r: pd.Series, link: Callable[[str, str], str | None] | None) -> Cell:
    href = link(str(r["breakdown"]), str(r["group"])) if link else None
    name = str(r["group"])
    if isinstance(r.get("recorded_in"), str) and r["recorded_in"]:  # a label hiding a mix
        name += f" ({r['recorded_in']})"
    return Html(f"<a href='{html.escape(href)}'>{html.escape(name)}</a>") if href else name


def _merge_gaps(cells: list[Cell]) -> list[Cell]:
    """Neighbouring cells withheld for the same reason become one cell across them, so a
    row's wording is said once per run of columns, not repeated in each."""
    out: list[Cell] = []
    for c in cells:
        last = out[-1] if out else None
        if isinstance(c, tuple) and isinstance(last, tuple) and last[0] == c[0]:
            out[-1] = gap_cell(c[0], last[1] + c[1])
        else:
            out.append(c)
    return out


def paired_table(frame: pd.DataFrame, table_id: str = "") -> str:
    """Paired comparisons (`agl.report.analysis.compare_runs` rows with `a` and `b`): means,
    A - B with its 95% CI and p; a row without an estimate gives its note once across those
    cells ("—" for no common scored clip, "insufficient data (...)" below minimum support)."""
    holm = "p_holm" in frame
    head = ["A", "B", "metric", "n", "clusters", "mean A", "mean B", "A - B [95% CI]", "p",
            *(["p (Holm)"] if holm else []), "detectable (80% power)"]
    rows: list[list[Cell]] = []
    split = False
    for _, r in frame.iterrows():
        digits = 1 if r["metric"] == "distance_km" else 3
        first: list[Cell] = [str(r["a"]), str(r["b"]), str(r["metric"]), f"{int(r['n']):,}",
                             f"{int(r.get('n_clusters', r['n'])):,}"]
        note = r.get("note")
        if isinstance(note, str) and note:
            rows.append([*first, gap_cell(note, 6 if holm else 5)])
            continue
        diff = f"{r['diff']:+,.{digits}f} [{r['ci_lo']:+,.{digits}f}, {r['ci_hi']:+,.{digits}f}]"
        mark = SPLIT_MARK if disagree(r) else ""
        split = split or bool(mark)
        rows.append([*first, number(r["mean_a"], digits), number(r["mean_b"], digits), diff,
                     f"{r['p_value']:.4f}{mark}", *([f"{r['p_holm']:.4f}"] if holm else []),
                     number(r.get("detectable"), digits)])
    out = table(head, rows, table_id)
    if holm and len(frame):  # the family the adjustment is over, said under the table
        family = html.escape(str(frame["family"].iloc[0]))
        out += (f"<p>p (Holm): Holm's step-down adjustment over the family '{family}' "
                f"({int(frame['p_holm'].notna().sum())} tests), beside the raw p.</p>")
    if split:
        out += f"<p class='note'>{html.escape(SPLIT_NOTE)}</p>"
    return out


SPLIT_MARK = " †"
# Why a row's interval and p-value may disagree (issue 50: [lo, hi] excluding 0 beside
# p = 0.054): they are two procedures over the same clusters, not one.
SPLIT_NOTE = ("† The interval and the p-value disagree at the 5% level on this row. They are two "
              "procedures on the same pairs (and clusters): the interval is a percentile bootstrap "
              "of A - B, which resamples the observed differences around their mean; the p-value is "
              "a sign-flip permutation test, which flips each cluster's difference around 0 (the "
              "null of no difference). Near the 5% boundary they can fall on either side of it; "
              "read the row as borderline, neither as a clear difference nor as none.")


def disagree(r: pd.Series) -> bool:
    """Whether a paired row's 95% interval and its p-value say different things at 5%."""
    lo, hi, p = (float(r.get(k, math.nan)) for k in ("ci_lo", "ci_hi", "p_value"))
    if not all(math.isfinite(x) for x in (lo, hi, p)):
        return False
    return (lo > 0 or hi < 0) != (p < 0.05)


def img(path: Path, alt: str, img_id: str) -> str:
    """A PNG inlined as base64 in a captioned figure, or a chart's one-line `NoData` note."""
    if isinstance(path, NoData):  # a chart with nothing to draw: its one-line note instead
        return f"<p class='no-chart' id='{html.escape(img_id)}'>{html.escape(path)}</p>"
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return (f"<figure><img id='{html.escape(img_id)}' alt='{html.escape(alt)}' "
            f"src='data:image/png;base64,{data}'><figcaption>{html.escape(alt)}</figcaption>"
            "</figure>")


def slug(name: str) -> str:
    """A run name made safe for file names and HTML ids (other characters become '_')."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
