"""`agl models`: the paper's 16 models under both protocols, what each needs, which are retired."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "models",
        help="list the paper's 16 models (src/agl/data/roster.yaml) under both protocols",
        description="The paper's models as `models:` entries for params.yaml, with the API "
        "key, GPU memory or server each needs, under two protocols: `paper` (the authors' "
        "runner, openllm.py, setting by setting) and `controlled` (temperature 0, 512 tokens, "
        "the providers' own SDKs). --yaml NAME prints one entry, indented to paste straight "
        "under `models:`; --check asks each provider which ids it still serves.",
    )
    p.add_argument("--yaml", metavar="NAME",
                   help="print NAME's entry, indented to paste under params.yaml models:")
    p.add_argument("--protocol", choices=("controlled", "paper"), default="controlled",
                   help="which protocol --yaml prints (default controlled)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="with --yaml: the entry with settings.seed N, named NAME-seedN so runs "
                        "of several seeds coexist (build/runs/NAME-seedN)")
    p.add_argument("--check", action="store_true",
                   help="ask each provider with a key set (OPENAI_API_KEY, GEMINI_API_KEY, "
                        "AGL_GATEWAY_URL + AGL_GATEWAY_KEY) which roster ids it still serves: "
                        "available, renamed or gone (needs the network)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands import _models_impl

    return _models_impl.run(args)
