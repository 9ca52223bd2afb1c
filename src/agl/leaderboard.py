"""The leaderboard: every evaluated run in one table, with CIs and the paper's values."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

COLUMNS = ("distance_error_km", "median_km", "geoscore", "continent_acc", "country_acc",
           "city_acc", "reject_rate", "failure_rate", "within_25km", "within_200km",
           "within_750km", "within_2500km")
PAPER_COLUMNS = ("distance_error_km", "continent_acc", "country_acc", "city_acc")


def collect(metrics_files: list[Path], protocol: str) -> pd.DataFrame:
    """One row per run from `metrics.json` files written by the evaluate stages."""
    rows = []
    for path in metrics_files:
        doc = json.loads(Path(path).read_text())
        res = doc["protocols"].get(protocol)
        if res is None:
            continue
        row: dict[str, Any] = {"run": doc["run"], "model": doc.get("model", doc["run"]),
                               "backend": doc.get("backend", ""), "source": doc.get("source", ""),
                               "paper_name": doc.get("paper_name") or "",
                               "dataset": doc.get("dataset", ""), "n": res["n"]}
        for c in COLUMNS:
            row[c] = res.get(c)
            lo, hi = res.get("ci95", {}).get(c, (None, None))
            row[f"{c}_lo"], row[f"{c}_hi"] = lo, hi
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.sort_values("distance_error_km", kind="stable").reset_index(drop=True)
    return frame


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
        return ""
    return f"{v:.{digits}f}"


def _with_ci(row: pd.Series, c: str, digits: int) -> str:
    v = _cell(row[c], digits)
    lo, hi = _cell(row[f"{c}_lo"], digits), _cell(row[f"{c}_hi"], digits)
    return f"{v} [{lo}, {hi}]" if v and lo else v


def render_rows(board: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    head = ["#", "run", "model", "n", "distance km [95% CI]", "paper km", "median km",
            "GeoScore", "continent", "paper", "country", "paper", "city", "paper", "reject"]
    rows = []
    for i, r in board.iterrows():
        rows.append([
            str(i + 1), r["run"], r["model"], str(r["n"]), _with_ci(r, "distance_error_km", 2),
            _cell(r["paper_distance_error_km"], 2), _cell(r["median_km"], 2),
            _cell(r["geoscore"], 1), _with_ci(r, "continent_acc", 2),
            _cell(r["paper_continent_acc"], 2), _with_ci(r, "country_acc", 2),
            _cell(r["paper_country_acc"], 2), _with_ci(r, "city_acc", 2),
            _cell(r["paper_city_acc"], 2), _cell(r["reject_rate"], 2),
        ])
    return head, rows


def write(board: pd.DataFrame, out_dir: Path, *, protocol: str, note: str = "") -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path, html_path = (out_dir / f"leaderboard.{e}" for e in ("csv", "md", "html"))
    from agl import canonical

    canonical.write_csv(board, csv_path)
    head, rows = render_rows(board)
    md = [f"# Leaderboard ({protocol} protocol)", ""]
    if note:
        md += [note, ""]
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    if board.empty:
        md.append("\n(no evaluated runs)")
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    html_path.write_text(
        "<!doctype html><meta charset='utf-8'><title>AGL1K leaderboard</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style>"
        f"<h1>Leaderboard ({html.escape(protocol)} protocol)</h1><p>{html.escape(note)}</p>"
        f"<table id='leaderboard'><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>",
        encoding="utf-8",
    )
    return [csv_path, md_path, html_path]
