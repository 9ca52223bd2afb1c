"""Localizability weights and the selection: the regressions, l_k, and the clips chosen.

Steps 4 to 8 of the method in `agl.curation.localizability`: the targets y split at γ, the
two non-negative regressions (a_i, ā_i), the P/N sets, each clip's l_k from its tags, the
speech-balanced selection of l_k > θ, the seeded holdout and the rank check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agl.curation.localizability_params import LocalizabilityConfig
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError


def targets(errors_km: np.ndarray, gamma_km: float, cap_km: float) -> tuple[np.ndarray, np.ndarray]:
    """(good mask, y): y = 1 - e/γ on good clips, min(1, (e-γ)/(cap-γ)) on the rest."""
    errors_km = np.asarray(errors_km, dtype=float)
    good = errors_km < gamma_km
    y = np.where(good, 1.0 - errors_km / gamma_km,
                 np.minimum(1.0, (errors_km - gamma_km) / (cap_km - gamma_km)))
    return good, y


def fit_weights(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares of y on x without intercept: the a with y ≈ x·a, a ≥ 0."""
    from scipy.optimize import nnls

    return nnls(np.asarray(x, dtype=float), np.asarray(y, dtype=float))[0]


@dataclass(frozen=True)
class Weights:
    """The fitted weights per category (AGL1K column order) and the clips behind each fit."""

    a: np.ndarray  # positive weights (good clips)
    a_bar: np.ndarray  # negative weights (bad clips)
    n_good: int
    n_bad: int

    @property
    def sets(self) -> list[str]:
        """Each category's set: P (a_i > ā_i), N (ā_i > a_i) or neutral."""
        return ["P" if p > n else "N" if n > p else "neutral" for p, n in zip(self.a, self.a_bar,
                                                                             strict=True)]

    @property
    def signed(self) -> np.ndarray:
        """w_i = a_i on P, -ā_i on N, 0 otherwise: l_k = t_k · w."""
        return np.where(self.a > self.a_bar, self.a, np.where(self.a_bar > self.a, -self.a_bar, 0.0))

    def frame(self):
        """The weights as a table (weights.csv): category, a, a_bar, set, weight, fit sizes."""
        import pandas as pd

        return pd.DataFrame({"category": list(CATEGORY_COLUMNS), "a": self.a, "a_bar": self.a_bar,
                             "set": self.sets, "weight": self.signed,
                             "n_good": self.n_good, "n_bad": self.n_bad})


def fit_localizability(x: np.ndarray, errors_km: np.ndarray, cfg: LocalizabilityConfig) -> Weights:
    """a_i from the clips with error < γ, ā_i from the rest (see the module docstring, 4)."""
    good, y = targets(errors_km, cfg.gamma_km, cfg.error_cap_km)
    n_good, n_bad = int(good.sum()), int((~good).sum())
    if min(n_good, n_bad) < cfg.min_clips_per_side:
        raise AglError(
            f"localizability: {n_good} fitted clip(s) have error < γ = {cfg.gamma_km:g} km and "
            f"{n_bad} do not; each side needs at least {cfg.min_clips_per_side} "
            "(change localizability.gamma_km or use a larger pool)")
    return Weights(fit_weights(x[good], y[good]), fit_weights(x[~good], y[~good]), n_good, n_bad)


def localizability(tags: np.ndarray, weights: Weights) -> np.ndarray:
    """l_k = Σ_P a_i t_ki − Σ_N ā_i t_ki for each row of `tags` (clips x categories)."""
    return np.asarray(tags, dtype=float) @ weights.signed


def select(keys: Sequence[str], l_k: np.ndarray, has_speech: np.ndarray, theta: float,
           target_size: int | None, speech_share: float) -> tuple[list[str], dict[str, Any]]:
    """Highly localizable clips (l_k > θ), speech-balanced, best first on each side."""
    keys = list(keys)
    l_k = np.asarray(l_k, dtype=float)
    has_speech = np.asarray(has_speech, dtype=bool)
    high = l_k > theta
    speech = sorted((i for i in range(len(keys)) if high[i] and has_speech[i]), key=lambda i: -l_k[i])
    other = sorted((i for i in range(len(keys)) if high[i] and not has_speech[i]),
                   key=lambda i: -l_k[i])
    if target_size is None:  # the largest set that keeps the share
        bounds = []
        if speech_share > 0:
            bounds.append(len(speech) / speech_share)
        if speech_share < 1:
            bounds.append(len(other) / (1 - speech_share))
        size = int(math.floor(min(bounds) + 1e-9))
    else:
        size = target_size
    want_speech = int(round(size * speech_share))
    want_other = size - want_speech
    chosen = speech[:want_speech] + other[:want_other]
    chosen.sort(key=lambda i: -l_k[i])
    info = {
        "highly_localizable": int(high.sum()),
        "target_size": size,
        "selected": len(chosen),
        "selected_speech": min(want_speech, len(speech)),
        "selected_no_speech": min(want_other, len(other)),
        "shortfall_speech": max(0, want_speech - len(speech)),
        "shortfall_no_speech": max(0, want_other - len(other)),
    }
    return [keys[i] for i in chosen], info


def holdout_split(keys: Sequence[str], fraction: float, seed: int) -> set[str]:
    """A seeded, order-independent held-out subset of `keys`."""
    ordered = sorted(keys)
    rng = np.random.default_rng(seed)
    n = int(round(len(ordered) * fraction))
    return {ordered[i] for i in rng.permutation(len(ordered))[:n]}


def rank_check(l_k: np.ndarray, errors_km: np.ndarray) -> dict[str, Any]:
    """Spearman's rho (and p) between l_k and the error; None with a note when undefined."""
    from scipy.stats import spearmanr

    if len(l_k) < 3 or np.ptp(l_k) == 0 or np.ptp(errors_km) == 0:
        return {"n": int(len(l_k)), "spearman_rho": None, "p_value": None,
                "note": "too few clips or no variation"}
    res = spearmanr(l_k, errors_km)
    return {"n": int(len(l_k)), "spearman_rho": float(res.statistic), "p_value": float(res.pvalue)}
