"""Stage counterfactual: the paired effect of every intervention on every model.

Reads params `counterfactual` (models, interventions, protocol, bootstrap, permutations,
seed, min_support); writes OUT_DIR/effects.csv (perturbed - original per model, intervention, level,
group and metric, with 95% paired bootstrap CI and permutation p-value) and
OUT_DIR/summary.json (the headline rows: all / speech / non-speech, mean km), and with
--headline each effect on all clips for `dvc exp show`. A group with fewer than
`min_support` paired clips gets its n and "insufficient data", no estimate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _params

from agl.core import canonical
from agl.counterfactual.effects import collect_effects


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", type=Path, help="the original runs (build/runs)")
    ap.add_argument("listen", type=Path, help="the listen stages' runs (build/listen)")
    ap.add_argument("perturb", type=Path, help="the derived datasets (build/perturb)")
    ap.add_argument("out", type=Path)
    ap.add_argument("--headline", type=Path, default=None,
                    help="headline metrics (JSON, tracked in git; what dvc exp show lists)")
    args = ap.parse_args(argv)
    cfg = _params.load("counterfactual")["counterfactual"]
    out = args.out
    effects = collect_effects(
        runs=args.runs,
        listen=args.listen,
        perturb=args.perturb,
        models=list(cfg["models"]),
        interventions=list(cfg["interventions"]),
        protocol=str(cfg.get("protocol", "paper")),
        n_boot=int(cfg["effect_bootstrap"]),
        n_perm=int(cfg["permutations"]),
        seed=int(cfg["seed"]),
        min_support=int(cfg.get("min_support", 10)),
    )
    out.mkdir(parents=True, exist_ok=True)
    canonical.write_csv(effects, out / "effects.csv")
    head = effects[effects["group"].isin(["all", "speech", "non_speech"]) & (effects["metric"] == "distance_km")]
    summary = {}
    for r in head.itertuples(index=False):
        key = f"{r.model}/{r.intervention}/{r.level}/{r.group}"
        if r.note:
            summary[key] = {"n": int(r.n), "insufficient": r.note}
            print(f"{key}: {r.note}", file=sys.stderr)
            continue
        summary[key] = {"n": int(r.n), "delta_km": r.diff, "ci95": [r.ci_lo, r.ci_hi], "p_value": r.p_value}
        print(
            f"{key}: n={r.n} delta {r.diff:+.1f} km [{r.ci_lo:+.1f}, {r.ci_hi:+.1f}] p={r.p_value:.4f}",
            file=sys.stderr,
        )
    canonical.write_json(out / "summary.json", summary)
    if args.headline:
        from agl.core.headline import counterfactual_headline, write_headline

        write_headline(args.headline, counterfactual_headline(summary))
    return 0


if __name__ == "__main__":
    _params.run_main(main)
