"""The report's "What the sound added" section: each model beside its own runs that did not
listen (the blind baseline, agl.backends.blind; the cascade, agl.backends.cascade), and, where
the manifest carries recording dates (agl.dataset.dates), accuracy by recording year and by
season (hemisphere-aware).

* A run of backend `blind` or `cascade` is paired with every run of another backend that asked
  the same model id (metrics.json `model`): the listening run minus the one without audio, on
  their common clips (`agl.report.analysis.compare_runs`: paired bootstrap over clusters and a
  sign-flip p-value). What the sound added is that difference; a cascade's is what hearing the
  audio itself adds over a text report of it.
* Dates: the manifest's `date` column (the tags' recording date; a year alone has no season).
  Seasons are meteorological (Dec-Feb winter in the north) and flipped south of the equator
  (the true latitude), so "summer" is summer where the clip was recorded.

None (no trace on the page) when the report has no run without audio and no recording date.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from agl.core import canonical
from agl.report.analysis import compare_runs, group_row
from agl.report.sections import SectionContext
from agl.report.tables import breakdown_legend, breakdown_table, paired_table, slug

DEAF = ("blind", "cascade")
SEASONS = ("winter", "spring", "summer", "autumn")  # in the north: DJF, MAM, JJA, SON


def season(date: str, latitude: float) -> str | None:
    """The season of a YYYY-MM(-DD) date at `latitude` (None without a month)."""
    if len(date) < 7 or not date[5:7].isdigit():
        return None
    month = int(date[5:7])
    north = (month % 12) // 3  # 0 winter (Dec, Jan, Feb), 1 spring, 2 summer, 3 autumn
    return SEASONS[north if latitude >= 0 else (north + 2) % 4]


def _backend_model(run) -> tuple[str, str]:
    path = run.info.get("metrics")
    if not path or not Path(path).exists():
        return "", ""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    return str(doc.get("backend") or ""), str(doc.get("model") or "")


def _sound_added(ctx: SectionContext) -> str | None:
    kinds = {r.name: _backend_model(r) for r in ctx.runs}
    pairs = [(a, b) for b in ctx.runs if kinds[b.name][0] in DEAF
             for a in ctx.runs if kinds[a.name][0] not in DEAF and kinds[a.name][1]
             and kinds[a.name][1] == kinds[b.name][1]]
    if not pairs:
        return None
    o = ctx.options
    frames = []
    for a, b in pairs:
        f = compare_runs(a.scored, b.scored, n_boot=o.paired_bootstrap, n_perm=o.paired_permutations,
                         seed=o.seed, min_support=o.min_support)
        frames.append(f.assign(a=a.name, b=f"{b.name} ({kinds[b.name][0]})"))
    table = pd.concat(frames, ignore_index=True)
    canonical.write_csv(table, ctx.tables / "sound_added.csv")
    return ("<h3>What the sound added</h3><p>Each listening run (A) beside a run of the same "
            "model that received no audio (B): <i>blind</i>, the prompt alone or with the "
            "clip's title; <i>cascade</i>, a text report of what Whisper, BirdNET and the "
            "tagger heard. A - B on their common clips is what the audio itself added "
            "(docs/baselines.md).</p>" + paired_table(table, "sound-added"))


def _by_date(ctx: SectionContext) -> str | None:
    manifest = ctx.inputs.manifest
    if manifest is None or not Path(manifest).exists():
        return None
    frame = pd.read_csv(manifest, keep_default_na=False, dtype=str)
    if "date" not in frame or not frame["date"].str.strip().astype(bool).any():
        return None
    dates = dict(zip(frame["key"], frame["date"].str.strip(), strict=True))
    o = ctx.options
    boot = {"bootstrap": o.group_bootstrap, "seed": o.seed}
    parts = []
    for run in ctx.pipeline_runs:
        s = run.scored
        d = s["sample_id"].astype(str).map(dates).fillna("")
        year = d.str[:4].where(d.str.len() >= 4, "no date")
        seas = [season(x, float(lat)) if x else None for x, lat in zip(d, s["true_lat"], strict=True)]
        seas = pd.Series([x or "no month" for x in seas], index=s.index)
        rows = [{"breakdown": "recording year", "group": g, **group_row(s[year == g], **boot)}
                for g in sorted(year.unique())]
        rows += [{"breakdown": "season (where recorded)", "group": g, **group_row(s[seas == g], **boot)}
                 for g in (*SEASONS, "no month") if (seas == g).any()]
        table = pd.DataFrame(rows)
        canonical.write_csv(table, ctx.tables / f"by_date_{slug(run.name)}.csv")
        parts.append(f"<h4>{html.escape(run.name)}</h4>"
                     + breakdown_table(table, f"by-date-{slug(run.name)}", o.min_support))
    return ("<h3>By recording date</h3><p>The recording date the files' tags give "
            "(manifest column <code>date</code>); seasons are meteorological and flipped south "
            f"of the equator.</p><p>{html.escape(breakdown_legend(o.min_support))}</p>" + "".join(parts))


def section(ctx: SectionContext) -> str | None:
    parts = [p for p in (_sound_added(ctx), _by_date(ctx)) if p]
    if not parts:
        return None
    return ("<section id='baselines-section'><h2>What else the model could be drawing on</h2>"
            + "".join(parts) + "</section>")
