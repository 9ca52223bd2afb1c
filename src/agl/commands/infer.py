"""`agl infer --backend B --model M --manifest F --audio-root D --out DIR ...`: one model run.

Writes DIR/predictions.jsonl (appended as replies arrive) and DIR/run_summary.json. Rerun
the same command to resume: finished clips are skipped, failed ones retried. Keys come
from environment variables only (GEMINI_API_KEY, OPENAI_API_KEY, or the one named with
`--setting api_key_env=NAME`).
"""

from __future__ import annotations

import argparse
import sys

from agl.core.retry import MAX_REPLY_BYTES, RETRY_AFTER_CAP_S


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("infer", help="run one model (backend) over a manifest's clips",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("--backend", required=True, help="backend name (e.g. gemini, openai, random)")
    p.add_argument("--model", default="", help="model id for the backend")
    p.add_argument("--base-url", action="append",
                   help="server URL for openai-compatible (and fake servers); repeat it for "
                        "replicas of one model (least-loaded routing, see docs/inference.md)")
    p.add_argument("--manifest", required=True, help="manifest CSV (AGL1K layout)")
    p.add_argument("--audio-root", help="folder with <key>/<mp3name> audio files")
    p.add_argument("--out", required=True, help="run folder for predictions.jsonl + summary")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    p.add_argument("--limit", type=int, help="only the first K clips of the manifest")
    p.add_argument("--prompt", default="default", help="prompt name (default, agl1k-paper, ...)")
    p.add_argument("--prompt-source", help="published result file for --prompt agl1k-paper")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument("--retries", type=int, default=5, help="retries on 429/5xx/timeouts")
    p.add_argument("--retry-after-cap", type=float, default=None,
                   help=f"longest server Retry-After honoured, seconds (default {RETRY_AFTER_CAP_S:g}); past "
                        "it the clip fails naming the server's request")
    p.add_argument("--max-reply-bytes", type=int, default=None,
                   help=f"largest reply body read, after decoding (default {MAX_REPLY_BYTES:,}); "
                        "a bigger one is refused and retried")
    p.add_argument("--cache-dir", default="cache/responses",
                   help="response cache folder ('' for none)")
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="backend setting, value read as YAML (repeatable)")
    p.add_argument("--price-in", type=float, default=0.0, help="USD per 1M input tokens")
    p.add_argument("--price-out", type=float, default=0.0, help="USD per 1M output tokens")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true",
                   help="print the requests, audio minutes and estimated cost; send nothing")
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


def parse_settings(pairs: list[str]) -> dict:
    import yaml

    from agl.errors import AglError

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


def _check_numbers(args: argparse.Namespace) -> None:
    """Counts and durations the run cannot use are refused before anything starts."""
    import math

    from agl.errors import AglError

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
    for name in ("price_in", "price_out"):
        v = getattr(args, name)
        if not (math.isfinite(v) and v >= 0):
            raise AglError(f"--{name.replace('_', '-')} must be 0 or more, got {v:g}")


def run(args: argparse.Namespace) -> int:
    from agl.inference.model_run import run_spec, summary_line
    from agl.inference.runspec import InferSettings, ModelSpec

    _check_numbers(args)
    from agl.core.outpaths import input_file, output_dir

    input_file(args.manifest, "--manifest", "manifest CSV")
    output_dir(args.out, "--out")
    settings = parse_settings(args.setting)
    if args.base_url:
        settings["base_url"] = args.base_url[0] if len(args.base_url) == 1 else args.base_url
    from agl.core.secrets import check_config  # lazy, as every command module's imports

    check_config(settings, "agl infer")  # a URL with user:password@ or ?api-key= too
    if args.batch:
        settings["mode"] = "batch"
    if args.batch_status or args.batch_cancel:
        from agl.batch.control import cancel_lines, status_lines

        act = cancel_lines if args.batch_cancel else status_lines
        for line in act(args.backend, args.model, settings, args.out, timeout_s=args.timeout):
            print(line)
        return 0
    spec = ModelSpec(name="cli", backend=args.backend, model=args.model, settings=settings,
                     price_in_per_m=args.price_in, price_out_per_m=args.price_out)
    infer = InferSettings(prompt=args.prompt, prompt_source=args.prompt_source,
                          concurrency=args.concurrency, timeout_s=args.timeout,
                          max_retries=args.retries, cache_dir=args.cache_dir or None,
                          **({} if args.retry_after_cap is None
                             else {"retry_after_cap_s": args.retry_after_cap}),
                          **({} if args.max_reply_bytes is None
                             else {"max_reply_bytes": args.max_reply_bytes}))
    if args.concurrency < 1:
        from agl.errors import AglError

        raise AglError("--concurrency must be at least 1")
    if args.dry_run:
        from agl.inference.estimate import estimate_run

        est = estimate_run(spec, infer, manifest=args.manifest, audio_root=args.audio_root,
                           out_dir=args.out, limit=args.limit)
        print(f"dry run: {args.backend}:{args.model or '-'}: {est.line()}")
        from agl.batch.options import price_line

        both = price_line(args.backend, settings, est.cost_usd)
        if both:
            print(f"dry run: {both}")
        return 0
    summary = run_spec(spec, infer, manifest=args.manifest, audio_root=args.audio_root,
                       out_dir=args.out, limit=args.limit, progress=not args.no_progress)
    print(summary_line(summary), file=sys.stderr)
    from agl.batch.hook import pending

    if pending(summary):
        # Not an error and not a finished run: 75 (EX_TEMPFAIL) tells a script to come back.
        print(f"agl infer: {pending(summary)} clip(s) still with the batch API; rerun the same "
              "command later to collect them", file=sys.stderr)
        return 75
    if summary["n_recorded"] and summary["n_failed"] == summary["n_recorded"]:
        print(f"agl infer: error: no clip succeeded (all {summary['n_failed']} failed; the "
              f"reasons are in the error field of {args.out}/predictions.jsonl)",
              file=sys.stderr)
        return 1
    return 0
