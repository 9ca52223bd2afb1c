"""The HTML pieces every section of the report shares: numbers, tables, figures and ids.

Used by the page (`agl.report.page`), the birds section (`agl.report.birds`) and any section
plugged into `agl.report.build.build_report`. Every text is escaped here, once.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from agl.report.analysis import insufficient
from agl.report.plots import NoData


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


def table(head: list[str], rows: list[list[str]], table_id: str = "") -> str:
    """An HTML table of text cells (escaped unless `Html`), with an optional id."""
    ident = f" id='{html.escape(table_id)}'" if table_id else ""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(
        f"<td>{c if isinstance(c, Html) else html.escape(c)}</td>" for c in r) + "</tr>"
        for r in rows)
    return f"<table{ident}><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def frame_table(frame: pd.DataFrame, table_id: str = "", digits: int = 3) -> str:
    """A DataFrame as an HTML table (a named index becomes the first column)."""
    frame = frame.reset_index() if frame.index.name else frame
    rows = [[number(v, digits) if isinstance(v, float) else str(v) for v in r]
            for r in frame.itertuples(index=False)]
    return table([str(c) for c in frame.columns], rows, table_id)


def supported(row: pd.Series, col: str, n_col: str, digits: int, min_n: int,
              ci: bool = True) -> str:
    """An estimate with its n beside it, or "insufficient data (n = k, needs m)"."""
    n = int(row[n_col])
    if n < min_n:
        return insufficient(n, min_n)
    value = with_ci(row, col, digits) if ci else number(row.get(col), digits)
    return f"{value} (n = {n})"


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
    """A breakdown (one row per group: n, distance and accuracies with CIs) as HTML; an
    estimate behind fewer than `min_n` clips reads "insufficient data". `link(breakdown,
    group)`: where a group's name links to (None: plain text)."""
    head = ["group", "n", "mean km [95% CI]", "median km", "continent acc", "country acc",
            "city acc", "reject rate", "failure rate"]

    def group_cell(r: pd.Series) -> str:
        href = link(str(r["breakdown"]), str(r["group"])) if link else None
        name = str(r["group"])
        return Html(f"<a href='{html.escape(href)}'>{html.escape(name)}</a>") if href else name

    rows = [[group_cell(r), str(r["n"]), supported(r, "mean_km", "n_km", 1, min_n),
             supported(r, "median_km", "n_km", 1, min_n, ci=False),
             *(supported(r, f"{lv}_acc", f"{lv}_n", 3, min_n)
               for lv in ("continent", "country", "city")),
             supported(r, "reject_rate", "n", 3, min_n),
             supported(r, "failure_rate", "n", 3, min_n)] for _, r in frame.iterrows()]
    return table(head, rows, table_id)


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
