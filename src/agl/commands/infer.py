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


def run(args: argparse.Namespace) -> int:
    # The work, imported when the command runs: `agl --help` imports every command module.
    from agl.commands import _infer_impl

    return _infer_impl.run(args)
