"""`agl models`: the paper's 16 models, how to run each and what it needs."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "models",
        help="list the paper's 16 models (src/agl/data/roster.yaml) and what each needs",
        description="The paper's models as `models:` entries for params.yaml, with the API "
        "key, GPU memory or server each needs. --yaml NAME prints one entry, indented to paste "
        "straight under `models:`.",
    )
    p.add_argument("--yaml", metavar="NAME",
                   help="print NAME's entry, indented to paste under params.yaml models:")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    from agl.errors import AglError  # lazy: `agl --help` imports every command module
    from agl.inference.roster import load_roster  # lazy: `agl --help` imports every command module

    roster = load_roster()
    if args.yaml:
        # The paper's spelling (`gemini-2.5-flash`) finds its entry too.
        match = [r for r in roster if r.spec.name in (args.yaml, args.yaml.replace(".", ""))]
        if not match:
            names = ", ".join(r.spec.name for r in roster)
            raise AglError(f"no model '{args.yaml}'; known: {names}")
        print(entry_yaml(match[0]), end="")
        return 0
    print(f"{'name':<26} {'paper_name':<27} {'backend':<18} needs")
    for r in roster:
        print(f"{r.spec.name:<26} {r.spec.paper_name or '':<27} {r.spec.backend:<18} "
              f"{'; '.join(needs(r, os.environ))}")
    return 0


def needs(r, environ) -> list[str]:
    out = []
    if r.key:
        out.append(f"key {r.key}" + (" (set)" if environ.get(r.key) else " (unset)"))
    if r.gpu_gb:
        out.append(f"GPU ~{r.gpu_gb:g} GB")
    if r.server:
        out.append("server: " + r.server)
    return out


def entry_yaml(r) -> str:
    """The entry as YAML indented to drop straight under `models:` in params.yaml (no header
    of its own), after a comment line saying what it is and what it needs."""
    import yaml

    s = r.spec
    entry = {"backend": s.backend, "model": s.model, "settings": s.settings,
             "price_in_per_m": s.price_in_per_m, "price_out_per_m": s.price_out_per_m,
             "paper_name": s.paper_name, "prompt": s.prompt, "prompt_source": s.prompt_source}
    if s.concurrency is not None:
        entry["concurrency"] = s.concurrency
    body = yaml.safe_dump({s.name: entry}, sort_keys=False, width=88)
    what = "; ".join(["the paper's " + (s.paper_name or s.name), *needs(r, {})]).replace(
        " (unset)", "")
    lines = [f"# {what}", *body.splitlines()]
    return "".join(f"  {line}\n" for line in lines)
