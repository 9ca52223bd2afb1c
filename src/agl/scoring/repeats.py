"""Stability over repeated runs: the same clips asked N times (`infer.repeats`).

At a temperature above 0 a model answers a clip differently from one request to the next,
so one run's accuracy carries sampling noise that no resampling of clips shows. With the
score tables of N repeats of one protocol (repeat 0, the run itself, first):

* each headline metric's mean and standard deviation across the repeats (ddof 1);
* `expected_country_acc`: the mean, over clips, of the share of repeats that got the
  country right (what one run scores on average);
* `consensus_country_acc`: the share of clips whose modal country over the repeats is right
  (a majority vote; a tie goes to the country the earliest repeat named);
* `agreement`: the mean, over clips, of the share of repeats that name the modal country;
* `flip_rate`: the share of clips whose country is not the same in every repeat. It says how
  often an answer changes, not how much a run's accuracy moves: flips in both directions
  cancel in the mean (a flip rate of 0.80 beside an accuracy SD of 0.058 on a synthetic set).
  The noise floor of a run's accuracy is its standard deviation over the repeats
  (`metrics.<name>.std`) and, for the mean over them, its standard error (`.se`);
* lmms-eval's figures (`calculate_stability_metrics`), over each clip's list of country
  correctness scores (clips the protocol does not score for country left out):
  `lmms_expected_accuracy` (the mean of every score), `lmms_consensus_accuracy` (the share of
  clips right in more than half the repeats: a tie is wrong; a majority of correctness, not
  of answers as `consensus_country_acc`), `lmms_internal_variance` (the mean over clips of the
  scores' variance, ddof 1) and `lmms_consistency_rate` (the share of clips whose score is the
  same in every repeat: right every time or wrong every time, so a clip whose wrong answers
  change is consistent there and a flip here; it is not 1 - flip rate).

Countries are compared as the protocol does (`pred_country` text, case- and space-folded);
a repeat that named no country counts as its own answer ("" ), so a clip that is refused in
one repeat and answered in another flips.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from agl.scoring.metrics import HEADLINE, summarize


def _country(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return " ".join(str(value).split()).casefold()


def stability(tables: list[pd.DataFrame]) -> dict[str, Any]:
    """Stability of one protocol's score tables (one per repeat, repeat 0 first); clips
    missing from a repeat are left out of the per-clip figures (counted in `n_clips`)."""
    n = len(tables)
    points = [summarize(t, bootstrap=0) for t in tables]
    metrics = {}
    for name in HEADLINE:
        values = np.array([p.get(name) for p in points], dtype=float)
        finite = values[np.isfinite(values)]
        std = float(finite.std(ddof=1)) if finite.size > 1 else None
        metrics[name] = {"mean": float(finite.mean()) if finite.size else None, "std": std,
                         "se": None if std is None else std / float(np.sqrt(finite.size)),
                         "values": [None if not np.isfinite(v) else float(v) for v in values]}
    keyed = [t.set_index("sample_id") for t in tables]
    common = sorted(set.intersection(*(set(k.index) for k in keyed))) if keyed else []
    expected, consensus, agreement, flips = [], [], [], 0
    per_clip: list[list[float]] = []  # each clip's country scores over the repeats (lmms-eval)
    for sid in common:
        names = [_country(k.at[sid, "pred_country"]) for k in keyed]
        right = [k.at[sid, "country_correct"] for k in keyed]
        counts = Counter(names)
        top = max(counts.values())
        modal = next(c for c in names if counts[c] == top)  # ties: the earliest repeat's
        scored = [float(r) for r in right if r == r]  # NaN: not scored for country
        if scored:
            expected.append(sum(scored) / len(scored))
            per_clip.append(scored)
        first = names.index(modal)
        if right[first] == right[first]:
            consensus.append(float(right[first]))
        agreement.append(top / n)
        flips += len(counts) > 1
    return {
        "n_repeats": n,
        "n_clips": len(common),
        "metrics": metrics,
        "expected_country_acc": float(np.mean(expected)) if expected else None,
        "consensus_country_acc": float(np.mean(consensus)) if consensus else None,
        "agreement": float(np.mean(agreement)) if agreement else None,
        "flip_rate": flips / len(common) if common else None,
        **lmms_stability(per_clip),
    }


def lmms_stability(scores: list[list[float]]) -> dict[str, float | None]:
    """lmms-eval's stability figures over per-clip lists of 0/1 scores, by its definitions
    (expected_accuracy, consensus_accuracy, internal_variance, consistency_rate)."""
    if not scores:
        return {k: None for k in ("lmms_expected_accuracy", "lmms_consensus_accuracy",
                                  "lmms_internal_variance", "lmms_consistency_rate")}
    pooled = [x for s in scores for x in s]
    variances = [float(np.var(s, ddof=1)) for s in scores if len(s) > 1]
    return {
        "lmms_expected_accuracy": sum(pooled) / len(pooled),
        "lmms_consensus_accuracy": sum(sum(s) > len(s) / 2 for s in scores) / len(scores),
        "lmms_internal_variance": float(np.mean(variances)) if variances else None,
        "lmms_consistency_rate": sum(len(set(s)) == 1 for s in scores) / len(scores),
    }
