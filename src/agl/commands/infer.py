"""`agl infer --backend B --model M --manifest F --audio-root D --out DIR ...`: one model run.

Writes DIR/predictions.jsonl (appended as replies arrive) and DIR/run_summary.json. Rerun
the same command to resume: finished clips are skipped, failed ones retried. Keys come
from environment variables only (GEMINI_API_KEY, OPENAI_API_KEY, or the one named with
`--setting api_key_env=NAME`). `--entry NAME` instead runs a params.yaml `models:` entry
exactly as its stage infer@NAME would (the entry, and `infer:` for how to run), e.g. with
--dry-run to see what a pasted entry will cost.
"""

from __future__ import annotations

import argparse
import sys

from agl.core.checks import arg_type
from agl.core.retry import MAX_REPLY_BYTES, RETRY_AFTER_CAP_S


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("infer", help="run one model (backend) over a manifest's clips",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("--backend", help="backend name (e.g. gemini, openai, random)")
    p.add_argument("--entry", metavar="NAME",
                   help="instead of --backend and the model/run flags: the entry NAME of "
                        "params.yaml models: with params.yaml infer: (as stage infer@NAME)")
    p.add_argument("--params", default="params.yaml", help="params file for --entry")
    p.add_argument("--model", help="model id for the backend")
    p.add_argument("--base-url", action="append",
                   help="server URL for openai-compatible (and fake servers); repeat it for "
                        "replicas of one model (least-loaded routing, see docs/inference.md)")
    p.add_argument("--manifest", required=True, help="manifest CSV (AGL1K layout)")
    p.add_argument("--audio-root", help="folder with <key>/<mp3name> audio files")
    p.add_argument("--out", required=True, help="run folder for predictions.jsonl + summary")
    p.add_argument("--concurrency", type=int, help="requests in flight (default 4)")
    p.add_argument("--limit", type=int, help="only the first K clips of the manifest")
    p.add_argument("--repeats", type=int,
                   help="ask each clip N times (default 1; repeats 1..N-1 in OUT/repeats/<k>/)")
    p.add_argument("--prompt", help="prompt name (default, agl1k-paper, ...)")
    p.add_argument("--prompt-source",
                   help="published result file for --prompt agl1k-paper (path, URL, paper:NAME)")
    p.add_argument("--timeout", type=float, help="seconds per request (default 120)")
    p.add_argument("--retries", type=int, help="retries on 429/5xx/timeouts (default 5)")
    p.add_argument("--retry-after-cap", type=float, default=None,
                   help=f"longest server Retry-After honoured, seconds (default {RETRY_AFTER_CAP_S:g}); past "
                        "it the clip fails naming the server's request")
    p.add_argument("--max-reply-bytes", type=int, default=None,
                   help=f"largest reply body read, after decoding (default {MAX_REPLY_BYTES:,}); "
                        "a bigger one is refused and retried")
    p.add_argument("--cache-dir", help="response cache folder (default cache/responses; '' for none)")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="backend setting, value read as YAML (repeatable)")
    p.add_argument("--protocol", choices=("controlled", "paper"),
                   help="controlled (default): each clip's sound alone, no container tags and no "
                        "file name; paper: the file as published, tags and all, as the authors "
                        "sent it (the run is marked: docs/inference.md#what-reaches-a-model)")
    p.add_argument("--max-spend-usd", type=float,
                   help="stop sending before this run's estimated spend passes this many USD "
                        "(at --price-in/--price-out); the clips not asked are recorded, and a "
                        "rerun with a higher cap asks only them")
    p.add_argument("--price-in", type=float, help="USD per 1M input tokens (default 0)")
    p.add_argument("--price-out", type=float, help="USD per 1M output tokens (default 0)")
    p.add_argument("--long-audio", choices=("native", "windows", "truncate", "multi_part"), default=None,
                   help="how a clip longer than --window-s is heard: native (the whole file), "
                        "windows (one request per window, answers combined on the sphere), "
                        "truncate (the first window); overrides an --entry's long_audio: "
                        "(docs/inference.md#long-audio)")
    p.add_argument("--window-s", type=arg_type("positive"), default=None, metavar="S",
                   help="seconds per window for --long-audio (default 30)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true",
                   help="print how many requests, their audio minutes, estimated tokens and cost "
                        "(counts, not the request bodies); send nothing")
    r = p.add_argument_group("executor (transport: never part of a record or a cache key; "
                             "docs/cluster.md)")
    r.add_argument("--executor", choices=("local", "ray"), default=None,
                   help="local: the async runner in this process; ray: shards on a Ray cluster "
                        "(default: params.yaml executor.kind with --entry, else local)")
    r.add_argument("--ray-address", metavar="ADDR", default=None,
                   help="the Ray cluster: auto, ray://host:10001 or host:6379 (default: a local "
                        "Ray sized to this machine)")
    r.add_argument("--ray-shards", type=int, default=None, metavar="N",
                   help="cut the pending clips into N interleaved shards (default 16)")
    b = p.add_argument_group("batch mode (gemini, openai; see docs/batch.md)")
    b.add_argument("--batch", action="store_true",
                   help="send the requests as batch jobs (half price, up to 24 h); returns once "
                        "they are submitted (exit 75 while clips are out); rerun to collect")
    b.add_argument("--batch-status", action="store_true",
                   help="print each batch job of --out: state, clips, counts, age; send nothing")
    b.add_argument("--batch-cancel", action="store_true",
                   help="cancel the batch jobs of --out; the next run collects what they "
                        "answered and sends the rest by the fallback")
    p.set_defaults(func=run)


def run_gone_named(spec, infer, args: argparse.Namespace) -> dict:
    """`run_spec`, with the roster's retirement mark and successor added to the one line a
    retired model stops the run with (agl.errors.ModelGone)."""
    from agl.errors import ModelGone  # lazy: `agl --help` imports every command module
    from agl.inference.params_run import RunTarget, run_spec  # (lazy, as above)

    try:
        return run_spec(spec, infer, RunTarget(args.manifest, args.audio_root, args.out),
                        limit=args.limit, progress=not args.no_progress,
                        transport=_transport(args, spec))
    except ModelGone as exc:
        from agl.inference.roster import retirement  # (lazy, as above)

        known = retirement(spec.model)
        line = str(exc)
        if known is not None and known.retired:
            line += f"; the roster marks it retired: {known.retired}"
        if known is not None and known.successor:
            line += f"; its suggested successor is '{known.successor}'"
        raise ModelGone(line, model=exc.model, provider_message=exc.provider_message) from None


def parse_settings(pairs: list[str]) -> dict:
    import yaml

    from agl.errors import AglError  # lazy: `agl --help` imports every command module

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise AglError(f"--setting {pair!r}: expected KEY=VALUE")
        key = key.strip()
        if _looks_like_key(key):
            raise AglError(f"--setting {key}=...: keys never go on the command line (they "
                           "end up in shell history and process lists); put the key in an "
                           "environment variable and name it with --setting api_key_env=NAME")
        try:
            out[key] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError as exc:
            raise AglError(f"--setting {key}: value is not valid YAML "
                           f"({str(exc).splitlines()[0]})") from None
    return out


def _looks_like_key(name: str) -> bool:
    from agl.core.secrets import looks_like_key  # lazy, as every command module's imports

    return looks_like_key(name)


# The flags that describe the model or how to run it: --entry takes all of them from params.yaml.
MODEL_FLAGS = ("backend", "model", "base_url", "setting", "price_in", "price_out", "prompt",
               "prompt_source", "concurrency", "timeout", "retries", "retry_after_cap", "cache_dir",
               "batch", "max_reply_bytes", "repeats", "protocol", "max_spend_usd")
DEFAULTS = {"concurrency": 4, "timeout": 120.0, "retries": 5, "price_in": 0.0,
            "price_out": 0.0, "prompt": "default", "cache_dir": "cache/responses", "setting": [],
            "repeats": 1}


def _check_numbers(args: argparse.Namespace) -> None:
    """Counts and durations the run cannot use are refused before anything starts."""
    import math

    from agl.errors import AglError  # lazy: `agl --help` imports every command module

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
    from agl.contracts.models import ModelSpec  # lazy: `agl --help` stays instant
    from agl.errors import AglError  # a command imports lazily: `agl --help` stays instant
    from agl.inference.runspec import InferSettings  # (lazy, as above)

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
    from agl.core.secrets import check_config  # lazy, as every command module's imports

    check_config(settings, "agl infer")  # a URL with user:password@ or ?api-key= too
    if args.batch:
        settings["mode"] = "batch"
    from agl.backends.base import model_or_default  # (lazy, as above)

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
    from agl.inference.runspec import MAX_REPEATS  # (lazy, as above)

    if not 1 <= args.repeats <= MAX_REPEATS:
        raise AglError(f"--repeats must be a whole number from 1 to {MAX_REPEATS}, got {args.repeats}")
    return spec, infer


def _from_entry(args: argparse.Namespace):
    """The entry as stage infer@NAME runs it: `models.NAME` and the `infer:` section."""
    from agl.contracts.models import parse_models  # lazy: `agl --help` stays instant
    from agl.errors import AglError  # a command imports lazily: `agl --help` stays instant
    from agl.inference.runspec import find_model, load_params, parse_infer  # (lazy, as above)

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
    import dataclasses  # lazy: `agl --help` stays instant

    from agl.contracts.long_audio import parse_long_audio  # (lazy, as above)

    given = {f.name: getattr(spec.long_audio, f.name) for f in dataclasses.fields(spec.long_audio)}
    if args.long_audio is not None:
        given["mode"] = args.long_audio
    if args.window_s is not None:
        given["window_s"] = args.window_s
    return dataclasses.replace(spec, long_audio=parse_long_audio(given, "agl infer --long-audio/--window-s"))


def _transport(args: argparse.Namespace, spec):
    """params.yaml `executor:` (with --entry) under the command's --executor / --ray-* flags,
    for this model; Ray missing is one line saying how to install it."""
    from agl.executor.config import ExecutorConfig  # (lazy, as above)
    from agl.inference.runspec import load_params  # lazy: `agl --help` stays instant

    base = (ExecutorConfig.from_params(load_params(args.params).get("executor"), str(args.params))
            if args.entry else ExecutorConfig())
    cfg = base.for_model(spec.name).with_flags(args.executor, args.ray_address, args.ray_shards)
    if cfg.kind == "ray":
        from agl.executor.ray_connect import require_ray  # (lazy, as above)

        require_ray()
    return cfg


def run(args: argparse.Namespace) -> int:
    from agl.core.outpaths import input_file, output_dir  # lazy: `agl --help` stays instant
    from agl.inference.entry import batch_control, finish_run  # (lazy, as above)
    from agl.inference.params_run import summary_line  # (lazy, as above)

    spec, infer = _from_entry(args) if args.entry else _from_flags(args)
    spec = _long_audio(args, spec)
    if args.batch_status or args.batch_cancel:
        return batch_control(spec, infer, args.out, cancel=args.batch_cancel)
    input_file(args.manifest, "--manifest", "manifest CSV")
    output_dir(args.out, "--out")
    label = f"{spec.backend}:{spec.model or '-'}"
    if args.dry_run:
        from agl.backends import get_backend  # (lazy, as above)
        from agl.inference.estimate import estimate_run  # (lazy, as above)
        from agl.inference.model_run import settings_where  # (lazy, as above)

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
        from agl.inference.batch.options import price_line  # (lazy, as above)

        both = price_line(spec.backend, spec.settings, est.cost_usd)
        if both:
            print(f"dry run: {both}")
        from agl.inference.roster import retirement  # (lazy, as above)

        known = retirement(spec.model)
        if known is not None and known.retired:
            print(f"dry run: model '{spec.model}' is retired ({known.retired}): a run stops at "
                  f"its first request" + (f"; suggested successor '{known.successor}'"
                                          if known.successor else ""))
        return 0
    summary = run_gone_named(spec, infer, args)
    print(summary_line(summary), file=sys.stderr)
    return finish_run(summary, who="agl infer", out_dir=args.out, rerun="the same command")
