"""`agl models`: the paper's 16 models, how to run each and what it needs."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "models",
        help="list the paper's 16 models (src/agl/data/roster.yaml) and what each needs",
        description="The paper's models as `models:` entries for params.yaml, with the API "
        "key, GPU memory or server each needs. --yaml NAME prints one entry to paste.",
    )
    p.add_argument("--yaml", metavar="NAME", help="print NAME's entry as params.yaml YAML")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    import yaml

    from agl.errors import AglError
    from agl.inference.roster import load_roster

    roster = load_roster()
    if args.yaml:
        match = [r for r in roster if r.spec.name == args.yaml]
        if not match:
            names = ", ".join(r.spec.name for r in roster)
            raise AglError(f"agl models: no model '{args.yaml}'; known: {names}")
        s = match[0].spec
        entry = {
            "backend": s.backend,
            "model": s.model,
            "settings": s.settings,
            "price_in_per_m": s.price_in_per_m,
            "price_out_per_m": s.price_out_per_m,
            "paper_name": s.paper_name,
            "prompt": s.prompt,
        }
        if s.concurrency is not None:
            entry["concurrency"] = s.concurrency
        print(yaml.safe_dump({"models": {s.name: entry}}, sort_keys=False), end="")
        return 0
    print(f"{'name':<26} {'paper_name':<27} {'backend':<18} needs")
    for r in roster:
        need = []
        if r.key:
            need.append(f"key {r.key}" + (" (set)" if os.environ.get(r.key) else " (unset)"))
        if r.gpu_gb:
            need.append(f"GPU ~{r.gpu_gb:g} GB")
        if r.server:
            need.append("server: " + r.server)
        print(f"{r.spec.name:<26} {r.spec.paper_name or '':<27} {r.spec.backend:<18} {'; '.join(need)}")
    return 0
