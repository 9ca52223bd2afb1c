"""Stage counterfactual: the paired effect of every intervention on every model.

usage: python stages/counterfactual.py RUNS_DIR LISTEN_DIR PERTURB_DIR OUT_DIR
Reads params `counterfactual` (models, interventions, protocol, bootstrap, permutations,
seed); writes OUT_DIR/effects.csv (perturbed - original per model, intervention, level,
group and metric, with 95% paired bootstrap CI and permutation p-value) and
OUT_DIR/summary.json (the headline rows: all / speech / non-speech, mean km).
"""

import json
import sys
from pathlib import Path

import _params


def main() -> int:
    runs, listen, perturb, out = sys.argv[1:5]
    cfg = _params.load("counterfactual")["counterfactual"]
    from agl.counterfactual import collect_effects

    effects = collect_effects(
        runs=Path(runs),
        listen=Path(listen),
        perturb=Path(perturb),
        models=list(cfg["models"]),
        interventions=list(cfg["interventions"]),
        protocol=str(cfg.get("protocol", "paper")),
        n_boot=int(cfg["bootstrap"]),
        n_perm=int(cfg["permutations"]),
        seed=int(cfg["seed"]),
    )
    Path(out).mkdir(parents=True, exist_ok=True)
    effects.to_csv(Path(out) / "effects.csv", index=False)
    head = effects[effects["group"].isin(["all", "speech", "non_speech"]) & (effects["metric"] == "distance_km")]
    summary = {
        f"{r.model}/{r.intervention}/{r.level}/{r.group}": {
            "n": int(r.n),
            "delta_km": r.diff,
            "ci95": [r.ci_lo, r.ci_hi],
            "p_value": r.p_value,
        }
        for r in head.itertuples(index=False)
    }
    (Path(out) / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    for key, v in sorted(summary.items()):
        print(
            f"{key}: n={v['n']} delta {v['delta_km']:+.1f} km [{v['ci95'][0]:+.1f}, "
            f"{v['ci95'][1]:+.1f}] p={v['p_value']:.4f}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    _params.run_main(main)
