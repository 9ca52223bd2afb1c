"""The report's section "What language alone tells".

* Accuracy by language heard: each run's country / continent accuracy and mean km by the
  clip's spoken language (the speech stage's `spoken_language` attribute): one row per
  language with at least `min_support` clips, the rarer ones pooled, then the clips whose
  speech has no likely language, the clips without speech, and clips the stage never heard.
* Beyond the language: every run beside the `langprior` run (Whisper's language x CLDR
  speakers, no model of geography) on the clips with an identified language: of the run's
  correct countries, the share the prior also gets; the clips the run gets right and the
  prior does not (a few listed with the run's reasoning); and the paired differences (km,
  country, continent) with bootstrap CIs and permutation p-values.

Runs scored on clips the speech stage has not heard (e.g. the authors' published runs while
data/ holds the demo) are named, with what the section needs to cover them: the speech stage
run on that dataset's audio.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pandas as pd

from agl.core import canonical
from agl.dataset.manifest import SYNTHETIC_MARK
from agl.report.analysis import compare_runs, group_row, insufficient
from agl.report.inputs import ReportOptions, RunInput
from agl.report.sections import SectionContext
from agl.report.tables import breakdown_table, frame_table, paired_table, slug
from agl.scoring.paired import with_holm
from agl.speech.tables import NO_SPEECH, NOT_LISTENED, UNCERTAIN, spoken_language

EXAMPLES = 5  # clips listed where a run is right and the prior is not
REASONING_CHARS = 400


def _backend(run) -> str:
    metrics = run.info.get("metrics")
    path = Path(metrics).parent / "run_summary.json" if metrics else None
    if path is None or not path.exists():
        return ""
    return str(json.loads(path.read_text()).get("backend") or "")


def find_langprior(runs) -> Any | None:
    return next((r for r in runs if _backend(r) == "langprior"), None)


def language_groups(groups: pd.Series, min_support: int) -> pd.Series:
    """Languages heard on fewer than `min_support` clips pooled into one row."""
    special = {NO_SPEECH, UNCERTAIN, NOT_LISTENED}
    counts = groups[~groups.isin(special)].value_counts()
    rare = sorted(counts[counts < min_support].index)
    if not rare:
        return groups
    label = f"other languages ({len(rare)}: {', '.join(rare)})"
    return groups.where(~groups.isin(rare), label)


def by_language(scored: pd.DataFrame, attribute: dict[str, str], *, min_support: int, bootstrap: int,
                seed: int) -> pd.DataFrame:
    """One run's breakdown by spoken language (languages by clip count, then the rest)."""
    raw = scored["sample_id"].astype(str).map(attribute).fillna(NOT_LISTENED)
    groups = language_groups(raw, min_support)
    tail = [UNCERTAIN, NO_SPEECH, NOT_LISTENED]
    counts = groups.value_counts()
    named = sorted((g for g in counts.index if g not in tail and not g.startswith("other languages")),
                   key=lambda g: (-counts[g], g))
    order = named + [g for g in counts.index if g.startswith("other languages")] + [g for g in tail if g in counts]
    rows = [{"breakdown": "spoken_language", "group": g,
             **group_row(scored[groups == g], bootstrap=bootstrap, seed=seed)} for g in order]
    return pd.DataFrame(rows)


def beyond(run, prior, keys: set[str], *, options) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """(counts, paired tests, examples) of `run` against the prior on the clips in `keys`."""
    a = run.scored[run.scored["sample_id"].astype(str).isin(keys)]
    b = prior.scored[prior.scored["sample_id"].astype(str).isin(keys)]
    j = a.merge(b, on="sample_id", suffixes=("", "_prior"))
    scored = j["country_correct"].notna() & j["country_correct_prior"].notna()
    right = scored & (j["country_correct"] == 1)
    prior_right = scored & (j["country_correct_prior"] == 1)
    n_right = int(right.sum())
    both = int((right & prior_right).sum())
    counts = {
        "run": run.name, "prior": prior.name, "clips": int(len(j)), "country_scored": int(scored.sum()),
        "run_correct": n_right, "prior_correct": int(prior_right.sum()), "both_correct": both,
        "run_only": int((right & ~prior_right).sum()), "prior_only": int((prior_right & ~right).sum()),
        "share_of_run_correct_also_prior": (both / n_right) if n_right >= options.min_support else None,
        "note": "" if n_right >= options.min_support else insufficient(n_right, options.min_support,
                                                                        " correct countries"),
    }
    paired = compare_runs(a, b, n_boot=options.paired_bootstrap, n_perm=options.paired_permutations,
                          seed=options.seed, min_support=options.min_support).assign(a=run.name, b=prior.name)
    rows = []
    for _, r in j[right & ~prior_right].sort_values("sample_id").head(EXAMPLES).iterrows():
        pred = (run.predictions or {}).get(str(r["sample_id"]))
        rows.append({"sample_id": r["sample_id"], "true_country": r["true_country"],
                     "run_country": r["pred_country"], "prior_country": r["pred_country_prior"],
                     "run_reasoning": ((pred.reasoning if pred else "") or "")[:REASONING_CHARS]})
    return counts, paired, pd.DataFrame(rows, columns=["sample_id", "true_country", "run_country",
                                                       "prior_country", "run_reasoning"])


def _intro(table: pd.DataFrame, synthetic: bool) -> str:
    listened = table[table["status"].isin(["ok", "uncertain", "no_speech"])]
    ok = table[table["status"] == "ok"]
    unc = int((table["status"] == "uncertain").sum())
    langs = ok["language_name"].value_counts()
    heard = ", ".join(f"{html.escape(k)} {v}" for k, v in langs.items()) or "none"
    text = (f"<p>Voice activity (Silero VAD) found speech in <b>{len(ok) + unc}</b> of {len(listened)} clips "
            f"listened to; Whisper identified a language in <b>{len(ok)}</b> of them ({heard}) and no "
            f"language was likely enough in {unc}. Clips without speech get no language, never a guess; "
            "'not listened': clips the stage skipped (failed the filter) or could not read.</p>")
    if synthetic:
        text += ("<p class='insufficient'>These are the SYNTHETIC demo clips: their speech is generated "
                 "babble (glottal pulses through formant filters, agl.dataset.synth), not any language. "
                 + ("No language is claimed for it: Whisper's candidates stayed below the threshold."
                    if ok.empty else f"The {len(ok)} language label(s) above are the identifier's error on "
                    "babble, not languages anyone spoke.") + "</p>")
    return text


def section(ctx: SectionContext) -> str | None:
    """The section over every run the report collected; None without the speech table."""
    if ctx.inputs.speech_csv is None:
        return None
    return speech_section(ctx.inputs.speech_csv, ctx.runs, ctx.options, ctx.tables, manifest=ctx.inputs.manifest)


def speech_section(speech_csv: Path, runs: list[RunInput], options: ReportOptions, tables: Path, *,
                   manifest: Path | None = None) -> str:
    """HTML of the section; its tables go to `tables/`."""
    parts = ["<section id='speech-section'><h2>What language alone tells</h2>"]
    if not Path(speech_csv).exists():
        parts.append("<p>No speech table (the speech stage did not run).</p></section>")
        return "\n".join(parts)
    table = pd.read_csv(speech_csv, keep_default_na=False, dtype=str)
    if len(table) == 0 or (table["status"] == "off").all():
        parts.append("<p>The speech stage is switched off (params.yaml speech.enabled).</p></section>")
        return "\n".join(parts)
    synthetic = False
    if manifest and Path(manifest).exists():
        titles = pd.read_csv(manifest, usecols=["title"], keep_default_na=False, dtype=str)["title"]
        synthetic = bool(len(titles)) and titles.str.startswith(SYNTHETIC_MARK).all()
    parts.append(_intro(table, synthetic))
    attribute = spoken_language(speech_csv)
    heard = [r for r in runs if r.scored["sample_id"].astype(str).isin(attribute).any()]
    unheard = [r for r in runs if r not in heard]
    if unheard:
        parts.append(
            "<p class='insufficient'>Not covered: " + ", ".join(html.escape(r.name) for r in unheard)
            + f" (scored on {html.escape(str(unheard[0].info.get('dataset') or 'another dataset'))}): the speech "
            "stage has not heard any of their clips. The breakdown needs that dataset's audio: set "
            "<code>data.dataset: agl1k</code>, run <code>agl download</code>, then <code>dvc repro speech "
            "report</code>.</p>")
    parts.append(_by_language_html(heard, attribute, options, tables))
    parts.append(_beyond_html(heard, attribute, options, tables))
    parts.append("</section>")
    return "\n".join(parts)


def _by_language_html(runs: list[RunInput], attribute: dict[str, str], options: ReportOptions, tables: Path) -> str:
    """Each run's accuracy by the language heard (tables/speech_language_breakdown.csv)."""
    boot = {"bootstrap": options.group_bootstrap, "seed": options.seed}
    frames = []
    parts = [f"<h3>Accuracy by language heard</h3><p>Languages heard on fewer than {options.min_support} "
             "clips are pooled; below that support an estimate is withheld.</p>"]
    for r in runs:
        t = by_language(r.scored, attribute, min_support=options.min_support, **boot)
        frames.append(t.assign(run=r.name))
        parts.append(f"<h4>{html.escape(r.name)}</h4>")
        parts.append(breakdown_table(t, f"speech-lang-{slug(r.name)}", options.min_support))
    if frames:
        canonical.write_csv(pd.concat(frames, ignore_index=True), tables / "speech_language_breakdown.csv")
    return "\n".join(parts)


def _beyond_html(runs, attribute, options, tables: Path) -> str:
    parts = ["<h3>Beyond the language</h3>"]
    prior = find_langprior(runs)
    if prior is None:
        parts.append("<p>No langprior run (add <code>langprior: {backend: langprior, model: pypi-whisper-base}"
                     "</code> to params.yaml models to compare).</p>")
        return "\n".join(parts)
    keys = {k for k, v in attribute.items() if v not in (NO_SPEECH, UNCERTAIN, NOT_LISTENED)}
    parts.append(f"<p>Each run beside <b>{html.escape(prior.name)}</b> (the spoken language and a census, "
                 f"no audio model of geography) on the {len(keys)} clip(s) with an identified language.</p>")
    if not keys:
        parts.append("<p>No clip has an identified language: nothing to compare on.</p>")
        return "\n".join(parts)
    counts, paired, examples = [], [], []
    for r in runs:
        if r is prior:
            continue
        c, p, e = beyond(r, prior, keys, options=options)
        counts.append(c)
        paired.append(p)
        if not e.empty:
            examples.append(e.assign(run=r.name))
    if not counts:
        parts.append("<p>No other run to compare.</p>")
        return "\n".join(parts)
    count_frame = pd.DataFrame(counts)
    canonical.write_csv(count_frame, tables / "speech_beyond_language.csv")
    parts.append("<p>run_correct: countries the run gets right; share_of_run_correct_also_prior: of those, "
                 "the share the prior gets too (what the language alone explains); run_only: right where "
                 "the prior is wrong or abstains.</p>")
    parts.append(frame_table(count_frame, "speech-beyond", 3))
    paired_frame = with_holm(pd.concat(paired, ignore_index=True),
                             "this table: each run against the language prior, every metric")
    canonical.write_csv(paired_frame, tables / "speech_beyond_paired.csv")
    parts.append("<p>Run - prior on the same clips: paired bootstrap 95% CI and sign-flip permutation p-value.</p>")
    parts.append(paired_table(paired_frame, "speech-beyond-paired"))  # the report's wording
    if examples:
        ex = pd.concat(examples, ignore_index=True)
        canonical.write_csv(ex, tables / "speech_beyond_examples.csv")
        parts.append(f"<h4>Right where the prior is not (up to {EXAMPLES} per run)</h4>")
        parts.append(frame_table(ex[["run", "sample_id", "true_country", "run_country", "prior_country",
                                     "run_reasoning"]], "speech-beyond-examples", 3))
    return "\n".join(parts)
