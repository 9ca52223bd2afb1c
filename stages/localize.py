"""DVC stage `localize`: Audio Localizability weights, per-clip l_k, and the selected clip list.

Reads params.yaml `localizability:` (γ, θ, judges, rating scale, target size, speech balance,
and `reference`: the predictions file of the reference run). Writes into --out-dir:
weights.csv (a_i, ā_i, P/N), clips.csv (l_k, split, error, x), ratings.csv (every judge's
ratings), selected.csv (the chosen keys); the summary is the stage's metrics file. Everything
is logged to MLflow as one run (agl.core.tracking), keyed by the inputs' content hashes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from _params import load, run_main

from agl.core import canonical
from agl.curation.localizability import ratings_frame, run_localizability
from agl.curation.localizability_judges import JUDGE_PROMPT
from agl.curation.localizability_params import LocalizabilityConfig
from agl.dataset.manifest import content_hash, load_manifest
from agl.errors import AglError


def read_reference(path: Path) -> dict:
    """key -> Prediction, from our predictions.jsonl or an authors' published result file."""
    from agl.predictions.importer import import_published, is_published_file
    from agl.predictions.records import read_predictions

    if not path.is_file():
        raise AglError(f"{path}: reference predictions not found; run the reference model first "
                       "(dvc repro infer) or set localizability.reference")
    if is_published_file(path):
        return {p.sample_id: p for p in import_published(path)}
    return read_predictions(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--manifest", required=True, type=Path)
    ap.add_argument("--tags", required=True, type=Path, help="the tag stage's tags.csv")
    ap.add_argument("--reference", required=True, type=Path, help="reference run predictions")
    ap.add_argument("--out-dir", required=True, type=Path)
    ap.add_argument("--summary", required=True, type=Path)
    ap.add_argument("--headline", type=Path, default=None,
                    help="headline metrics (JSON, tracked in git; what dvc exp show lists)")
    ap.add_argument("--params", type=Path, default=None, help="default: the repo's params.yaml")
    args = ap.parse_args(argv)
    where = {"path": args.params} if args.params else {}
    section = load("localizability", **where)["localizability"]
    import pandas as pd

    params = section
    cfg = LocalizabilityConfig.from_params(params)
    manifest = load_manifest(args.manifest)
    try:
        tags = pd.read_csv(args.tags, dtype={"key": str})
    except FileNotFoundError:
        raise AglError(f"{args.tags}: tags not found; run the tag stage first") from None
    result = run_localizability(manifest, tags, read_reference(args.reference), cfg)

    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    canonical.write_csv(result.weights.frame(), out / "weights.csv")
    canonical.write_csv(result.clips, out / "clips.csv")
    canonical.write_csv(ratings_frame(result.ratings), out / "ratings.csv")
    sel = result.clips.set_index("key").loc[result.selected, ["l_k", "has_speech"]].reset_index()
    canonical.write_csv(sel, out / "selected.csv")
    summary = {**result.summary, "reference_file": str(args.reference)}
    canonical.write_json(args.summary, summary)
    if args.headline:
        from agl.core.headline import localizability_headline, write_headline

        write_headline(args.headline, localizability_headline(summary))

    from agl.core.tracking import log_run
    from agl.prompts import load_prompt

    hashes = {name: content_hash(p)[:12] for name, p in
              (("manifest", args.manifest), ("tags", args.tags), ("reference", args.reference))}
    check = summary["check_holdout"]
    log_run(
        # The params are part of the key: each experiment of a γ/θ sweep is its own run.
        run_key=(f"localizability:{hashes['manifest']}:{hashes['tags']}:{hashes['reference']}:"
                 + hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode())
                 .hexdigest()[:12]),
        run_name="localizability",
        params={**params, "judge_prompt_sha256": load_prompt(JUDGE_PROMPT).sha256,
                **{f"sha256.{k}": v for k, v in hashes.items()}},
        metrics={"holdout_spearman_rho": check["spearman_rho"], "holdout_p": check["p_value"],
                 "holdout_n": check["n"], "selected": summary["selection"]["selected"],
                 "highly_localizable": summary["selection"]["highly_localizable"],
                 "clips": summary["clips"], "judge_clips_rated": summary["judges"]["clips_rated"],
                 "judge_alpha": summary["judges"]["agreement_krippendorff_alpha_interval"],
                 **{f"a.{c}": w["a"] for c, w in summary["weights"].items()},
                 **{f"a_bar.{c}": w["a_bar"] for c, w in summary["weights"].items()}},
        artifacts=[out, args.summary],
        tags={"agl.stage": "localize"},
    )
    rho = check["spearman_rho"]
    print(f"localize: {summary['selection']['selected']} of {summary['clips']} clip(s) selected; "
          f"P={summary['P']} N={summary['N']}; held-out Spearman(l_k, error) = "
          f"{'n/a' if rho is None else f'{rho:.3f}'} (n={check['n']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
