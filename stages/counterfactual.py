"""Stage counterfactual: the paired effect of every intervention on every model.

Reads params `counterfactual` (models, interventions, protocol, bootstrap, permutations,
seed, min_support) and `evaluate.max_resamples` (the bound on its counts); writes
OUT_DIR/effects.csv (perturbed - original per model, intervention, level, group and metric,
with 95% paired bootstrap CI and permutation p-value) and
OUT_DIR/summary.json (the headline rows: all / speech / non-speech, mean km), and with
`counterfactual.long_audio` one model's long-audio protocols against its reference run, the
same way (intervention `long_audio`, plus groups by quartile of clip length), and with
--headline each effect on all clips for `dvc exp show`. A group with fewer than
`min_support` paired clips gets its n and "insufficient data", no estimate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _params

from agl.core import canonical
from agl.counterfactual.effects import EffectsConfig, collect_effects, effects_summary
from agl.counterfactual.long_audio import long_audio_effects, manifest_durations


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", type=Path, help="the original runs (build/runs)")
    ap.add_argument("listen", type=Path, help="the listen stages' runs (build/listen)")
    ap.add_argument("perturb", type=Path, help="the derived datasets (build/perturb)")
    ap.add_argument("out", type=Path)
    ap.add_argument("--manifest", type=Path, default=None,
                    help="the dataset's manifest: clip lengths for counterfactual.long_audio's "
                         "breakdown by quartile of duration")
    ap.add_argument("--headline", type=Path, default=None,
                    help="headline metrics (JSON, tracked in git; what dvc exp show lists)")
    args = ap.parse_args(argv)
    p = _params.load("counterfactual", "evaluate.max_resamples")
    config = EffectsConfig.from_params(p["counterfactual"], p["evaluate.max_resamples"])
    durations = manifest_durations(args.manifest) if args.manifest and config.long_audio else None
    effects = collect_effects(args.runs, args.listen, args.perturb, config,
                              more=long_audio_effects(args.runs, config, durations))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    canonical.write_csv(effects, out / "effects.csv")
    summary, lines = effects_summary(effects)
    for line in lines:
        print(line, file=sys.stderr)
    canonical.write_json(out / "summary.json", summary)
    if args.headline:
        from agl.core.headline import counterfactual_headline, write_headline

        write_headline(args.headline, counterfactual_headline(summary))
    return 0


if __name__ == "__main__":
    _params.run_main(main)
