"""The work of `agl infer` (agl.commands.infer registers the command and its flags, and
imports this module when the command runs: `agl --help` imports every command module, and
this one imports the inference machinery)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

import yaml

from agl.backends import get_backend
from agl.backends.base import model_or_default
from agl.contracts.long_audio import parse_long_audio
from agl.contracts.models import ModelSpec, parse_models
from agl.core.outpaths import input_file, output_dir
from agl.core.secrets import check_config, looks_like_key
from agl.errors import AglError, ModelGone
from agl.executor.config import ExecutorConfig
from agl.executor.ray_connect import require_ray
from agl.inference.batch.options import price_line
from agl.inference.entry import batch_control, finish_run
from agl.inference.estimate import estimate_run
from agl.inference.model_run import settings_where
from agl.inference.params_run import RunTarget, run_spec, summary_line
from agl.inference.roster import retirement
from agl.inference.runspec import (
    MAX_REPEATS,
    InferSettings,
    find_model,
    load_params,
    parse_infer,
)


def run_gone_named(spec, infer, args: argparse.Namespace) -> dict:
    """`run_spec`, with the roster's retirement mark and successor added to the one line a
    retired model stops the run with (agl.errors.ModelGone)."""
    try:
        return run_spec(spec, infer, RunTarget(args.manifest, args.audio_root, args.out),
                        limit=args.limit, progress=not args.no_progress,
                        transport=_transport(args, spec))
    except ModelGone as exc:
        known = retirement(spec.model)
        line = str(exc)
        if known is not None and known.retired:
            line += f"; the roster marks it retired: {known.retired}"
        if known is not None and known.successor:
            line += f"; its suggested successor is '{known.successor}'"
        raise ModelGone(line, model=exc.model, provider_message=exc.provider_message) from None


def parse_settings(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise AglError(f"--setting {pair!r}: expected KEY=VALUE")
        key = key.strip()
        if looks_like_key(key):
            raise AglError(f"--setting {key}=...: keys never go on the command line (they "
                           "end up in shell history and process lists); put the key in an "
                           "environment variable and name it with --setting api_key_env=NAME")
        try:
            out[key] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError as exc:
            raise AglError(f"--setting {key}: value is not valid YAML "
                           f"({str(exc).splitlines()[0]})") from None
    return out


# The flags that describe the model or how to run it: --entry takes all of them from params.yaml.
MODEL_FLAGS = ("backend", "model", "base_url", "setting", "price_in", "price_out", "prompt",
               "prompt_source", "concurrency", "timeout", "retries", "retry_after_cap", "cache_dir",
               "batch", "max_reply_bytes", "repeats", "protocol", "max_spend_usd")
DEFAULTS = {"concurrency": 4, "timeout": 120.0, "retries": 5, "price_in": 0.0,
            "price_out": 0.0, "prompt": "default", "cache_dir": "cache/responses", "setting": [],
            "repeats": 1}


def _check_numbers(args: argparse.Namespace) -> None:
    """Counts and durations the run cannot use are refused before anything starts."""
    if args.concurrency < 1:
        raise AglError("--concurrency must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise AglError(f"--limit must be at least 1, got {args.limit}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise AglError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.retries < 0:
        raise AglError(f"--retries must be 0 or more, got {args.retries}")
    if args.max_reply_bytes is not None and args.max_reply_bytes < 1:
        raise AglError(f"--max-reply-bytes must be positive, got {args.max_reply_bytes}")
    cap = args.retry_after_cap
    if cap is not None and not (math.isfinite(cap) and cap >= 0):
        raise AglError(f"--retry-after-cap must be 0 or more seconds, got {cap:g}")
    spend = args.max_spend_usd
    if spend is not None and not (math.isfinite(spend) and spend > 0):
        raise AglError(f"--max-spend-usd must be a positive number of USD, got {spend:g}")
    for name in ("price_in", "price_out"):
        v = getattr(args, name)
        if not (math.isfinite(v) and v >= 0):
            raise AglError(f"--{name.replace('_', '-')} must be 0 or more, got {v:g}")


def _from_flags(args: argparse.Namespace):
    """The model and how to run it from the command's flags (defaults filled in)."""
    if not args.backend:
        raise AglError("give --backend (with --model and the run flags) or --entry NAME "
                       "(a params.yaml models: entry)")
    for k, v in DEFAULTS.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    _check_numbers(args)
    settings = parse_settings(args.setting)
    if args.base_url:
        settings["base_url"] = args.base_url[0] if len(args.base_url) == 1 else args.base_url
    check_config(settings, "agl infer")  # a URL with user:password@ or ?api-key= too
    if args.batch:
        settings["mode"] = "batch"
    # No --model: the backend's default, which its params.yaml entry names too (one default
    # whatever the entrance; tests/test_backend_defaults.py).
    spec = ModelSpec(name="cli", backend=args.backend, model=model_or_default(args.backend, args.model),
                     settings=settings, price_in_per_m=args.price_in, price_out_per_m=args.price_out,
                     protocol=args.protocol)
    infer = InferSettings(prompt=args.prompt, prompt_source=args.prompt_source,
                          concurrency=args.concurrency, timeout_s=args.timeout,
                          max_retries=args.retries, cache_dir=args.cache_dir or None,
                          repeats=args.repeats, max_spend_usd=args.max_spend_usd,
                          **({} if args.retry_after_cap is None
                             else {"retry_after_cap_s": args.retry_after_cap}),
                          **({} if args.max_reply_bytes is None
                             else {"max_reply_bytes": args.max_reply_bytes}))
    if not 1 <= args.repeats <= MAX_REPEATS:
        raise AglError(f"--repeats must be a whole number from 1 to {MAX_REPEATS}, got {args.repeats}")
    return spec, infer


def _from_entry(args: argparse.Namespace):
    """The entry as stage infer@NAME runs it: `models.NAME` and the `infer:` section."""
    # `is not None`, not `not in (None, False)`: `--retries 0` equals False and was dropped
    # without a word (the entry's 5 retries ran) while `--retries 1` was refused.
    given = [f"--{k.replace('_', '-')}" for k in MODEL_FLAGS
             if getattr(args, k) is not None and getattr(args, k) is not False and getattr(args, k) != []]
    if given:
        raise AglError(f"--entry {args.entry} takes the model and how to run it from "
                       f"{args.params}; drop {', '.join(given)} (or edit the entry)")
    if args.limit is not None and args.limit < 1:
        raise AglError(f"--limit must be at least 1, got {args.limit}")
    params = load_params(args.params)
    spec = find_model(parse_models(params.get("models"), str(args.params)), args.entry,
                      str(args.params))
    return spec, parse_infer(params.get("infer"), str(args.params))


def _long_audio(args: argparse.Namespace, spec):
    """The spec with --long-audio / --window-s over its `long_audio:` (a derived run: its
    own fingerprint, so it never mixes with the entry's records)."""
    if args.long_audio is None and args.window_s is None:
        return spec

    given = {f.name: getattr(spec.long_audio, f.name) for f in dataclasses.fields(spec.long_audio)}
    if args.long_audio is not None:
        given["mode"] = args.long_audio
    if args.window_s is not None:
        given["window_s"] = args.window_s
    return dataclasses.replace(spec, long_audio=parse_long_audio(given, "agl infer --long-audio/--window-s"))


def _transport(args: argparse.Namespace, spec):
    """params.yaml `executor:` (with --entry) under the command's --executor / --ray-* flags,
    for this model; Ray missing is one line saying how to install it."""
    base = (ExecutorConfig.from_params(load_params(args.params).get("executor"), str(args.params))
            if args.entry else ExecutorConfig())
    cfg = base.for_model(spec.name).with_flags(args.executor, args.ray_address, args.ray_shards)
    if cfg.kind == "ray":
        require_ray()
    return cfg


def run(args: argparse.Namespace) -> int:
    spec, infer = _from_entry(args) if args.entry else _from_flags(args)
    spec = _long_audio(args, spec)
    if args.batch_status or args.batch_cancel:
        return batch_control(spec, infer, args.out, cancel=args.batch_cancel)
    input_file(args.manifest, "--manifest", "manifest CSV")
    output_dir(args.out, "--out")
    label = f"{spec.backend}:{spec.model or '-'}"
    if args.dry_run:
        # A misspelt setting is refused before a cost is printed for it.
        get_backend(spec.backend).check_settings(dict(spec.settings or {}), settings_where(spec))
        # Offline: a prompt that would be downloaded is named, not fetched.
        est = estimate_run(spec, infer, manifest=args.manifest, audio_root=args.audio_root,
                           out_dir=args.out, limit=args.limit, fetch=False)
        print(f"dry run: {label}: {est.line()}" + (f" (long_audio {spec.long_audio.mode})"
                                                    if spec.long_audio.windowed else ""))
        for mode, other in est.modes:  # what each long-audio protocol would cost, every clip
            print(f"dry run:   {mode}: {other.line()}")
        unset = get_backend(spec.backend).unset_key_envs(spec.settings)
        if unset:
            print(f"dry run: no API key: set {' or '.join(unset)} before the real run, which "
                  "refuses to start without it")
        both = price_line(spec.backend, spec.settings, est.cost_usd)
        if both:
            print(f"dry run: {both}")
        known = retirement(spec.model)
        if known is not None and known.retired:
            print(f"dry run: model '{spec.model}' is retired ({known.retired}): a run stops at "
                  f"its first request" + (f"; suggested successor '{known.successor}'"
                                          if known.successor else ""))
        return 0
    summary = run_gone_named(spec, infer, args)
    print(summary_line(summary), file=sys.stderr)
    return finish_run(summary, who="agl infer", out_dir=args.out, rerun="the same command")
