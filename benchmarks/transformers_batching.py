"""Clips per second of the `transformers` backend at batch sizes 1, 4 and 8.

A tiny random model of a real family (tests/tiny_models.py; default Qwen2-Audio) runs the
real path end to end (decode + resample the real AGL1K MP3s in ../shared, chat template,
feature extraction, left-padded batched greedy generation, parsing, fsync'd predictions)
on `--n` requests (the two real clips repeated under distinct keys, each cut to
`--seconds`), and prints clips/s per batch size and the ratio to batch size 1: end to end
(after the model load; includes MP3 decoding and resampling) and for generation alone
(the sum of the generate calls' prefill + decode, from the backend's efficiency log).

    python benchmarks/transformers_batching.py [--family qwen2_audio] [--n 32]
        [--seconds 10] [--new-tokens 16] [--device cpu|cuda] [--dtype float32|bfloat16]

A tiny model's numbers say how much batching removes per-call overhead (Python, kernel
launches, the audio encoder's fixed 30 s window); a 7B model on a GPU gains for another
reason (memory-bound decoding), so quote these as what they are.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen2_audio")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--batch-sizes", default="1,4,8")
    args = ap.parse_args()

    import pandas as pd
    import torch
    from tiny_models import FAMILIES

    from agl.contracts.models import ModelSpec
    from agl.dataset.manifest import clips, load_manifest, write_manifest
    from agl.inference.model_run import run_inference
    from agl.inference.runner import RunOptions
    from agl.prompts import load_prompt

    archive = (ROOT / ".." / "shared" / "data" / "agl1k" / "archive").resolve()
    mp3s = sorted(archive.glob("*/*.mp3"))
    if not mp3s:
        sys.exit(f"no MP3s under {archive}: the shared test data is missing")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = FAMILIES[args.family](tmp / "model")
        root = tmp / "audio"
        rows = []
        for i in range(args.n):
            src = mp3s[i % len(mp3s)]
            key = f"clip_{i:04d}"
            (root / key).mkdir(parents=True)
            (root / key / src.name).symlink_to(src)
            rows.append(
                {
                    "key": key,
                    "mp3name": src.name,
                    "latitude": 0.0,
                    "longitude": 0.0,
                    "mp3seconds": 0.0,
                    "city": "",
                    "country": "",
                    "continent": "",
                    "human_sounds": 0.0,
                    "animal": 0.0,
                    "music": 0.0,
                    "natural_sounds": 0.0,
                    "channel": 0.0,
                    "environment_and_background": 0.0,
                    "sounds_of_things": 0.0,
                    "source_ambiguous_sounds": 0.0,
                }
            )
        write_manifest(pd.DataFrame(rows), tmp / "m.csv")
        cl = clips(load_manifest(tmp / "m.csv"))
        print(
            f"{args.family} (tiny, random), {args.n} clips of {args.seconds:g} s, "
            f"{args.new_tokens} new tokens, device {args.device}, torch threads "
            f"{torch.get_num_threads()}"
        )
        base = gen_base = None
        texts: dict[int, dict[str, str]] = {}
        for bs in [int(b) for b in args.batch_sizes.split(",")]:
            out = tmp / f"run_bs{bs}"
            eff = tmp / f"eff_bs{bs}.jsonl"
            settings = {
                "device": args.device,
                "dtype": args.dtype,
                "batch_size": bs,
                "max_seconds": args.seconds,
                "max_new_tokens": args.new_tokens,
                "efficiency_log": str(eff),
            }
            t0 = time.perf_counter()
            run_inference(
                ModelSpec("run", "transformers", str(model_dir), settings=settings),
                load_prompt(),
                cl,
                out_dir=out,
                audio_root=root,
                options=RunOptions(cache_dir=None, concurrency=2 * bs, timeout_s=3600,
                                   max_retries=0, progress=False),
            )
            wall = time.perf_counter() - t0
            batches = [json.loads(line) for line in eff.read_text().splitlines()]
            load = batches[0]["load_s"]
            rate = args.n / (wall - load)
            base = base or rate
            gen = sum(b["prefill_s"] + b["decode_s"] for b in batches)
            gen_rate = args.n / gen
            gen_base = gen_base or gen_rate
            peak = max(b["peak_mem_mb"] for b in batches)
            sizes = sorted({b["batch"] for b in batches})
            with open(out / "predictions.jsonl") as fh:
                texts[bs] = {r["sample_id"]: r["raw_reply"] for r in map(json.loads, fh)}
            same = texts[bs] == texts[min(texts)]
            print(
                f"batch {bs}: end to end {rate:6.2f} clips/s ({rate / base:4.2f}x); "
                f"generation alone {gen_rate:6.2f} clips/s ({gen_rate / gen_base:4.2f}x); "
                f"{len(batches)} generate calls (sizes {sizes}), {gen:.2f} s generating of "
                f"{wall - load:.2f} s after a {load:.2f} s load; peak memory {peak:.0f} MB; "
                f"replies identical to batch {min(texts)}: {same}"
            )


if __name__ == "__main__":
    main()
