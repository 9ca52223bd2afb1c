"""The work of `agl models` (agl.commands.models registers the command and imports this
module when it runs): the roster as a table, one entry as YAML, or the providers asked."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

import yaml

from agl.errors import AglError
from agl.inference.model_check import check_roster
from agl.inference.roster import load_baselines, load_roster


def run(args: argparse.Namespace) -> int:
    if args.check:
        for line in check_roster(os.environ):
            print(line)
        return 0
    roster = load_roster(protocol=args.protocol)
    if args.yaml:
        # The paper's spelling (`gemini-2.5-flash`) finds its entry too.
        known = [*roster, *load_baselines()]
        match = [r for r in known if r.spec.name in (args.yaml, args.yaml.replace(".", ""))]
        if not match:
            names = ", ".join(r.spec.name for r in known)
            raise AglError(f"no model '{args.yaml}'; known: {names}")
        print(entry_yaml(with_seed(match[0], args.seed) if args.seed is not None else match[0]),
              end="")
        return 0
    roster = load_roster(protocol="controlled")
    paper = {r.spec.name: r for r in load_roster(protocol="paper")}
    print(f"{'name':<26} {'paper_name':<27} {'protocol':<11} {'backend':<18} {'model':<36} "
          "decoding; needs")
    for r in roster:
        for proto, e in (("controlled", r), ("paper", paper[r.spec.name])):
            print(f"{r.spec.name if proto == 'controlled' else '':<26} "
                  f"{r.spec.paper_name if proto == 'controlled' else '':<27} {proto:<11} "
                  f"{e.spec.backend:<18} {e.spec.model:<36} "
                  f"{decoding(e.spec.settings)}; {'; '.join([*needs(e, os.environ), 'hears ' + hears(e)])}")
        if r.retired:
            print(f"{'':<26} RETIRED {r.retired}"
                  + (f"; successor: {r.successor}" if r.successor else ""))
    print("\nbaselines that do not listen (docs/baselines.md):")
    for r in load_baselines():
        print(f"{r.spec.name:<26} {'':<27} {'':<11} {r.spec.backend:<18} {r.spec.model:<36} "
              f"{decoding(r.spec.settings)}; {'; '.join(needs(r, os.environ))}")
    print("\nprotocols: `agl models --yaml NAME --protocol paper|controlled`; the paper's "
          "gateway entries read AGL_GATEWAY_URL and AGL_GATEWAY_KEY (docs/backends.md)")
    print("hears: what a model hears of a long clip by default (docs/inference.md#long-audio); "
          "an entry's long_audio: or settings.processor_truncation, or agl infer --long-audio, "
          "overrides")
    return 0


_DECODING = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "max_output_tokens",
             "max_new_tokens", "thinking_level", "thinking_budget", "reasoning_effort",
             "do_sample", "seed", "stream")


def sampled(settings: dict) -> bool:
    """Whether an entry samples (a seed matters): a temperature above 0, `do_sample`, or no
    temperature at all on a served model (the provider's default decoding)."""
    if "do_sample" in settings or "max_new_tokens" in settings:  # transformers
        return bool(settings.get("do_sample"))
    t = settings.get("temperature")
    return t is None or float(t) > 0


def decoding(settings: dict) -> str:
    """The settings that reach the model, short (the provider's defaults where none is set)."""
    out = [f"{k} {settings[k]}" for k in _DECODING if k in settings]
    extra = settings.get("extra_body") or {}
    out += [f"{k} {v}" for k, v in extra.items() if k != "chat_template_kwargs"]
    if "chat_template_kwargs" in extra:
        out.append(f"template {extra['chat_template_kwargs']}")
    if settings.get("system_prompt"):
        out.append(f"system \"{str(settings['system_prompt'])[:24]}...\"")
    if settings.get("audio_format"):
        out.append(f"audio as {settings['audio_format']}")
    return ", ".join(out) or "provider defaults"


def hears(r) -> str:
    """What an entry hears of a clip longer than 30 s by default (issue 45): its own
    `long_audio:`, else its processor truncation (transformers: the family's default, by the
    roster's `family`), else the whole file (an API; a server decides what its model hears,
    which `heard_s_reported` measures where its usage says)."""
    s = r.spec
    if s.long_audio.windowed:
        la = s.long_audio
        return f"long_audio {la.mode}, {la.window_s:g}-s windows"
    if s.backend == "transformers":
        if "processor_truncation" in s.settings:
            return ("first window (processor truncation on)" if s.settings["processor_truncation"]
                    else "whole clip (processor truncation off)")
        # imports torch and transformers: only the table's transformers rows need it
        from agl.backends.local_transformers import hears_by_default

        return hears_by_default(r.family)
    if s.backend == "openai-compatible":
        return "whole file, as the server takes it"
    return "whole clip"


def with_seed(r, seed: int):
    """The roster entry `r` run with `seed`, under a name of its own (`NAME-seedN`), so the
    runs of several seeds live in separate folders, as the authors' seed_42_* files did."""
    name = f"{r.spec.name}-seed{seed}"
    settings = {**r.spec.settings, "seed": int(seed)}
    if "efficiency_log" in settings:  # each run's timings beside its own folder
        settings["efficiency_log"] = str(settings["efficiency_log"]).replace(
            f"/{r.spec.name}/", f"/{name}/")
    spec = replace(r.spec, name=name, settings=settings)
    return replace(r, spec=spec)


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
    of its own), after comment lines saying what it is, what it needs and, for a retired
    model, that it is retired and what to run instead."""
    s = r.spec
    entry = {"backend": s.backend, "model": s.model, "settings": s.settings,
             "price_in_per_m": s.price_in_per_m, "price_out_per_m": s.price_out_per_m,
             "paper_name": s.paper_name, "prompt": s.prompt, "prompt_source": s.prompt_source,
             "protocol": s.protocol}
    if s.price_audio_in_per_m is not None:  # audio billed apart (after the input price)
        entry = {**{k: v for k, v in entry.items() if k != "price_out_per_m"},
                 "price_audio_in_per_m": s.price_audio_in_per_m, "price_out_per_m": s.price_out_per_m}
        entry = {k: entry[k] for k in ("backend", "model", "settings", "price_in_per_m",
                                       "price_audio_in_per_m", "price_out_per_m", "paper_name",
                                       "prompt", "prompt_source", "protocol")}
    if s.concurrency is not None:
        entry["concurrency"] = s.concurrency
    if s.long_audio.windowed:  # an entry's own long-audio protocol travels with it
        entry["long_audio"] = s.long_audio.protocol()
    body = yaml.safe_dump({s.name: entry}, sort_keys=False, width=88)
    what = "; ".join([("the paper's " + s.paper_name) if s.paper_name else
                      f"baseline {s.name} ({s.backend}; docs/baselines.md)", f"{s.protocol} protocol",
                      *needs(r, {})]).replace(" (unset)", "")
    lines = [f"# {what}"]
    if r.retired:
        lines.append(f"# RETIRED {r.retired}: a run stops at its first request"
                     + (f"; successor: {r.successor}" if r.successor else ""))
    if "seed" in s.settings and not sampled(s.settings):
        lines.append(f"# seed {s.settings['seed']}: this entry decodes greedily, so every seed "
                     "gives the same answers")
    lines += body.splitlines()
    return "".join(f"  {line}\n" for line in lines)
