"""One model's long-audio protocols, paired: a long-audio mode is a derived run, as an
intervention is (issue 45).

The same model run under several `long_audio:` protocols (three entries of `models:`: its
first 30 s, its whole clip, a random 30 s) answers the same clips; `long_audio_effects`
compares each with the reference run (the first listed: the paper's first 30 s) as the
counterfactual stage compares an intervention with the original clips (agl.counterfactual.
effects.paired_effects: paired bootstrap intervals by the resampling unit, sign-flip p),
and adds the clips by quartile of their length: where hearing more helps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from agl.contracts.long_audio import protocol_label
from agl.counterfactual.effects import LONG_AUDIO, EffectsConfig, paired_effects, read_scores
from agl.dataset.manifest import load_manifest
from agl.errors import AglError


def manifest_durations(manifest: Path) -> pd.Series:
    """Seconds per clip key: the manifest's `mp3seconds` (the quartiles' measure)."""
    frame = load_manifest(manifest)
    return pd.Series(pd.to_numeric(frame["mp3seconds"], errors="coerce").to_numpy(),
                     index=frame["key"].astype(str))


def long_audio_effects(runs: Path, config: EffectsConfig, durations: pd.Series | None) -> list[pd.DataFrame]:
    """One model's long-audio protocols against its reference run (the first of each
    `counterfactual.long_audio` list), on the clips both score: the same paired effects as an
    intervention's (model: the reference run; level: the other run; kind: what the other run
    heard, from its summary), plus groups by quartile of clip length (`durations`, seconds
    by clip key: the manifest's). Runs of different models are refused in one line."""
    frames = []
    protocol = config.protocol
    for group in config.long_audio:
        about = {}
        for name in group:
            path = Path(runs) / name / "run_summary.json"
            if not path.exists():
                raise AglError(f"{path}: no run summary; run infer@{name} first "
                               "(params.yaml counterfactual.long_audio names it)")
            about[name] = json.loads(path.read_text(encoding="utf-8"))
        ref = group[0]
        same = {(about[n].get("backend"), about[n].get("model")) for n in group}
        if len(same) > 1:
            raise AglError(f"params.yaml counterfactual.long_audio: {', '.join(group)} are not one "
                           f"model ({'; '.join(f'{b}:{m}' for b, m in sorted(same, key=str))}); "
                           "each list holds one model's runs under different long_audio protocols")
        original = read_scores(Path(runs) / ref / f"scores_{protocol}.csv")
        for other in group[1:]:
            scores = read_scores(Path(runs) / other / f"scores_{protocol}.csv")
            if durations is not None:
                scores = scores.assign(duration_s=scores["sample_id"].astype(str).map(durations))
            table = paired_effects(original, scores, n_boot=config.effect_bootstrap,
                                   n_perm=config.permutations, seed=config.seed,
                                   min_support=config.min_support, unit=config.resampling_unit)
            heard = (f"{protocol_label(about[other].get('long_audio'))} vs "
                     f"{protocol_label(about[ref].get('long_audio'))}")
            table.insert(0, "value", float("nan"))
            table.insert(0, "level", other)
            table.insert(0, "kind", heard)
            table.insert(0, "intervention", LONG_AUDIO)
            table.insert(0, "model", ref)
            frames.append(table)
    return frames


