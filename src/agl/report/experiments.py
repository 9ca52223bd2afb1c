"""`agl exp`: DVC's experiments as a table a terminal can show.

`dvc exp show` lists every param and metric of the project: 21,821 columns on the demo, and
in a 50-column pager every cell collapses to "…". This reads the same data
(`dvc exp show --json`) and keeps what a comparison needs:

* one row per experiment (the workspace, each baseline commit, each experiment under it);
* the params whose value differs between the rows (a sweep's knobs), named by their shortest
  unambiguous suffix (`full_coverage` for `leaderboard.full_coverage`);
* per run (each `metrics/runs/<run>.json`), its headline metric (`--metric`, default
  `mean_km`); the curation headlines (`localize.selected`, ...) only with `--wide`.

It fits `width` columns: the run columns that do not fit are left out and counted in a last
line that names `--wide`. Nothing here calls DVC; `agl.commands.exp` runs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agl.core.jsonutil import flatten

RUNS_PREFIX = "metrics/runs/"


@dataclass(frozen=True)
class ExpRow:
    """One experiment: its name, revision, flat params and flat metrics."""

    name: str
    rev: str
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # "<run>.<metric>" or "<file stem>.<key>"
    error: str = ""
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # metrics/runs/<run>.json: run -> metrics


def _flat(d: Any) -> dict[str, Any]:
    """A params or metrics document as dotted keys (nothing for a document that is not a mapping)."""
    return flatten(d) if isinstance(d, dict) else {}


def _row(node: dict[str, Any], state: str = "") -> ExpRow:
    data = node.get("data") or {}
    params: dict[str, Any] = {}
    for file, doc in (data.get("params") or {}).items():
        flat = _flat((doc or {}).get("data") or {})
        params.update(flat if file == "params.yaml" else {f"{file}:{k}": v for k, v in flat.items()})
    metrics: dict[str, Any] = {}
    runs: dict[str, dict[str, Any]] = {}
    for file, doc in (data.get("metrics") or {}).items():
        body = (doc or {}).get("data") or {}
        metrics.update(_flat(body))
        if file.startswith(RUNS_PREFIX):  # {run: {metric: value}}; a run name may hold dots
            runs.update({str(k): v for k, v in body.items() if isinstance(v, dict)})
    rev = str(node.get("rev") or data.get("rev") or "")
    name = str(node.get("name") or (rev if rev == "workspace" else rev[:7]))
    err = node.get("error") or ""
    err = str(err.get("msg") or err.get("type") or "error") if isinstance(err, dict) else str(err)
    if not err and state in ("failed", "queued", "running"):  # a queue's experiment, not run yet or failed
        err = state
    return ExpRow(name, rev, params, metrics, err, runs)


def rows_from_dvc(doc: list[dict[str, Any]]) -> list[ExpRow]:
    """The rows of `dvc exp show --json` (DVC 3: baselines, each with its experiments)."""

    def walk(nodes: list[dict[str, Any]], state: str = "") -> Iterator[ExpRow]:
        for node in nodes or []:
            yield _row(node, state)
            for group in node.get("experiments") or []:
                yield from walk(group.get("revs") or [], str((group.get("executor") or {}).get("state") or ""))

    return list(walk(doc))


def changed_params(rows: list[ExpRow]) -> list[str]:
    """The params whose value is not the same in every row that has params (missing counts
    as a value; a queued or failed experiment without data changes nothing)."""
    rows = [r for r in rows if r.params]
    keys = sorted({k for r in rows for k in r.params})
    return [k for k in keys if len({repr(r.params.get(k)) for r in rows}) > 1]


def short_names(keys: list[str]) -> dict[str, str]:
    """Each dotted key by its shortest suffix no other key ends with."""
    out = {}
    for k in keys:
        parts = k.split(".")
        for n in range(1, len(parts) + 1):
            cand = ".".join(parts[-n:])
            if not any(o != k and (o == cand or o.endswith("." + cand)) for o in keys):
                out[k] = cand
                break
        else:
            out[k] = k
    return out


def runs_of(rows: list[ExpRow], metric: str) -> list[str]:
    """The runs that report `metric` in any row, in name order."""
    return sorted({run for r in rows for run, m in r.runs.items() if metric in m})


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3f}".rstrip("0").rstrip(".") if v else "0"
    text = str(v) if not isinstance(v, list) else ",".join(map(str, v))
    return text if len(text) <= 24 else text[:23] + "…"


@dataclass(frozen=True)
class ExpTable:
    """What is printed: headers, cells, and what was left out to fit."""

    headers: list[str]
    cells: list[list[str]]
    left_out: list[str] = field(default_factory=list)

    def text(self) -> str:
        widths = [max(len(h), *(len(r[i]) for r in self.cells)) for i, h in enumerate(self.headers)]

        def line(cells: list[str]) -> str:  # names left, numbers right
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

        lines = [line(self.headers), "  ".join("-" * w for w in widths), *map(line, self.cells)]
        if self.left_out:
            lines.append(f"({len(self.left_out)} more column(s) left out to fit: "
                         f"{', '.join(self.left_out[:6])}{', …' if len(self.left_out) > 6 else ''}; "
                         "--wide shows them)")
        return "\n".join(line.rstrip() for line in lines)


def table(rows: list[ExpRow], metric: str = "mean_km", width: int | None = 120) -> ExpTable:
    """The compact table (`width` None: every column, every headline metric of every run)."""
    params = changed_params(rows)
    pnames = short_names(params)
    cols: list[tuple[str, Any]] = [(pnames[k], lambda r, k=k: r.params.get(k)) for k in params]
    if width is None:  # --wide: every metric of every file
        keys = sorted({k for r in rows for k in r.metrics})
        cols += [(k, lambda r, k=k: r.metrics.get(k)) for k in keys]
    else:
        cols += [(run if len(runs_of(rows, metric)) > 1 else f"{run} {metric}",
                  lambda r, run=run: r.runs.get(run, {}).get(metric)) for run in runs_of(rows, metric)]
    headers = ["experiment"]
    cells: list[list[str]] = [[r.name + (f" ({_cell(r.error)})" if r.error else "")] for r in rows]
    left_out = []
    for head, get in cols:
        col = [_cell(get(r)) for r in rows]
        used = sum(max(len(h), *(len(c[i]) for c in cells)) + 2 for i, h in enumerate(headers))
        need = max(len(head), *map(len, col))
        if width is not None and used + need > width:
            left_out.append(head)
            continue
        headers.append(head)
        for c, v in zip(cells, col, strict=True):
            c.append(v)
    if width is not None and metric and not runs_of(rows, metric):
        left_out.append(f"(no run reports {metric})")
    return ExpTable(headers, cells, left_out)


def as_json(rows: list[ExpRow]) -> list[dict[str, Any]]:
    """`--json`: each row with the params that differ and every metric."""
    params = changed_params(rows)
    return [{"experiment": r.name, "rev": r.rev, "error": r.error or None,
             "params": {k: r.params.get(k) for k in params}, "metrics": dict(sorted(r.metrics.items()))}
            for r in rows]
