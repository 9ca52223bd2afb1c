"""Every transformers family the paper (or the backend) runs, end to end on real audio.

Each family is a tiny random model built from its own config classes (tests/tiny_models.py),
saved the way its published checkpoint is laid out, and run through `run_inference` on the
two real AGL1K MP3s plus a 3 s cut of one (so that clips in a batch differ in length). The
same clips at batch size 1 and at batch size 3 must give the same greedy text.
"""

from __future__ import annotations

import pandas as pd
import pytest
import soundfile as sf
from tiny_models import FAMILIES

from agl.contracts.models import ModelSpec
from agl.dataset.manifest import CATEGORY_COLUMNS, clips, load_manifest, write_manifest
from agl.errors import AglError
from agl.inference.model_run import run_inference
from agl.inference.runner import RunOptions
from agl.predictions.records import read_predictions
from agl.prompts import load_prompt


@pytest.fixture(scope="session")
def audio_set(tmp_path_factory, real_mp3s):
    """An audio root with the two real MP3s (128 s, 141 s) and a 3 s WAV cut of the first,
    and the manifest's clips for it."""
    root = tmp_path_factory.mktemp("audio")
    rows = []
    for p in real_mp3s:
        (root / p.parent.name).mkdir()
        (root / p.parent.name / p.name).symlink_to(p)
        rows.append((p.parent.name, p.name))
    data, sr = sf.read(str(real_mp3s[0]), frames=3 * 44100, dtype="float32")
    (root / "short_cut").mkdir()
    sf.write(str(root / "short_cut" / "cut.wav"), data[: 3 * sr], sr)
    rows.append(("short_cut", "cut.wav"))
    table = pd.DataFrame(
        [
            {
                "key": k,
                "mp3name": n,
                "latitude": 0.0,
                "longitude": 0.0,
                "mp3seconds": 0.0,
                "city": "",
                "country": "",
                "continent": "",
                **dict.fromkeys(CATEGORY_COLUMNS, 0.0),
            }
            for k, n in rows
        ]
    )
    write_manifest(table, root / "manifest.csv")
    return root, clips(load_manifest(root / "manifest.csv"))


def _run(model_dir, audio_set, out, **settings):
    root, cl = audio_set
    return run_inference(
        ModelSpec("run", "transformers", str(model_dir),
                  settings={"device": "cpu", "max_new_tokens": 6, **settings}),
        load_prompt(),
        cl,
        out_dir=out,
        audio_root=root,
        options=RunOptions(cache_dir=None, concurrency=max(1, int(settings.get("batch_size", 1))),
                           timeout_s=300, max_retries=0, progress=False),
    )


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_batched_equals_unbatched(tmp_path, name, family_model, audio_set):
    model_dir = family_model(name)
    one = _run(
        model_dir, audio_set, tmp_path / "b1", max_seconds=8, batch_size=1, efficiency_log=str(tmp_path / "eff1.jsonl")
    )
    three = _run(
        model_dir, audio_set, tmp_path / "b3", max_seconds=8, batch_size=3, efficiency_log=str(tmp_path / "eff3.jsonl")
    )
    assert one["n_failed"] == three["n_failed"] == 0
    p1 = read_predictions(tmp_path / "b1" / "predictions.jsonl")
    p3 = read_predictions(tmp_path / "b3" / "predictions.jsonl")
    assert set(p1) == set(p3) == {c.key for c in audio_set[1]}
    for key in p1:
        assert p1[key].raw_reply == p3[key].raw_reply, key
        assert p1[key].meta["input_tokens"] == p3[key].meta["input_tokens"], key
        assert p1[key].meta["output_tokens"] == p3[key].meta["output_tokens"], key
    # What the model heard: 8 s of each long clip (cut), all 3 s of the short one.
    long_keys = [k for k in p1 if k != "short_cut"]
    for k in long_keys:
        m = p1[k].meta
        assert m["heard_s"] == 8.0 and m["truncated"] is True and m["audio_s"] > 120
    short = p1["short_cut"].meta
    assert short["heard_s"] == 3.0 and short["truncated"] is False and short["audio_s"] == 3.0
    # Per-clip audio lengths reach the prompt: the 3 s clip has fewer audio placeholders,
    # except in Gemma-3n, whose processor gives every clip 188 (its feature mask marks the
    # frames that are real; see test_gemma3n_window_matches_its_feature_extractor).
    long_tokens = min(p1[k].meta["input_tokens"] for k in long_keys)
    if name == "gemma3n":
        assert short["input_tokens"] == long_tokens
    else:
        assert short["input_tokens"] < long_tokens
    # The efficiency log: one line per generate call, batches of 3 in the batched run.
    eff1 = (tmp_path / "eff1.jsonl").read_text().splitlines()
    eff3 = (tmp_path / "eff3.jsonl").read_text().splitlines()
    assert len(eff1) == 3 and len(eff3) == 1 and '"batch": 3' in eff3[0]
    assert '"peak_mem_mb"' in eff3[0] and "peak_mem_mb" not in p3[long_keys[0]].meta


def _one_long(tmp_path, family_model, audio_set, name, out, **settings):
    root, cl = audio_set
    one = [c for c in cl if c.key != "short_cut"][:1]
    summary = run_inference(
        ModelSpec("run", "transformers", str(family_model(name)),
                  settings={"device": "cpu", "max_new_tokens": 2, **settings}),
        load_prompt(),
        one,
        out_dir=tmp_path / out,
        audio_root=root,
        options=RunOptions(cache_dir=None, concurrency=1, timeout_s=300, max_retries=0,
                           progress=False),
    )
    return summary, read_predictions(tmp_path / out / "predictions.jsonl")[one[0].key].meta


@pytest.mark.parametrize("name", ["qwen2_5_omni", "phi4_multimodal"])
def test_family_window_is_recorded(tmp_path, name, family_model, audio_set):
    """No `max_seconds`: the family's own default decides. Qwen2.5-Omni's chunked encoder
    takes any length, so its processor's truncation is switched off (the authors' call left
    it on: 30 s) and 50 s of a 50-s cut are heard; switched on, its Whisper extractor keeps
    30 s, and the prompt holds fewer audio tokens (the switch reached the processor). Phi-4's
    extractor has no limit: all 128 s, and there is no truncation to switch on (one line)."""
    cap = {"max_seconds": 50} if name == "qwen2_5_omni" else {}  # a 50-s clip: cheaper than 128 s
    summary, m = _one_long(tmp_path, family_model, audio_set, name, "o", **cap)
    assert m["heard_s"] == (50.0 if cap else m["audio_s"]) and m["audio_s"] > 120
    assert m["processor_truncation"] is False and m["transformers_version"]
    assert summary["heard"]["processor_truncation"] == [False]
    if name == "qwen2_5_omni":
        assert m["window_s"] == 30.0
        _, cut = _one_long(tmp_path, family_model, audio_set, name, "on", processor_truncation=True, **cap)
        assert cut["window_s"] == 30.0 and cut["heard_s"] == 30.0 and cut["truncated"] is True
        assert cut["processor_truncation"] is True
        assert m["input_tokens"] > cut["input_tokens"] + 100  # 50 s reached the model, not 30
    else:
        assert m["window_s"] is None and m["truncated"] is False
        with pytest.raises(AglError, match=r"^transformers backend: processor_truncation: true is "
                                           r"refused for the phi4_multimodal family: its extractor"):
            _one_long(tmp_path, family_model, audio_set, name, "on", processor_truncation=True)


def test_a_30_s_family_refuses_processor_truncation_off(tmp_path, family_model, audio_set):
    """Qwen2-Audio's encoder takes 30 s: `processor_truncation: false` is one line before any
    clip is asked (nothing recorded), pointing at windows."""
    with pytest.raises(AglError, match=r"refused for the qwen2_audio family: its Whisper encoder "
                                       r"takes 30 s .*long_audio: \{mode: windows\}"):
        _one_long(tmp_path, family_model, audio_set, "qwen2_audio", "off", processor_truncation=False)
    assert not (tmp_path / "off" / "predictions.jsonl").exists()


def test_audio_only_processor_without_torchvision(family_model):
    """The omni processors carry a video processor that needs torchvision; without it the
    backend builds the same processor class from tokenizer, feature extractor and template."""
    import importlib.util

    from agl.backends._transformers_loading import load_processor

    proc = load_processor(str(family_model("qwen2_5_omni")))
    assert type(proc).__name__ == "Qwen2_5OmniProcessor"
    assert proc.feature_extractor.sampling_rate == 16000
    assert "<|AUDIO|>" in proc.apply_chat_template(
        [{"role": "user", "content": [{"type": "audio", "audio": "x"}, {"type": "text", "text": "where?"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    if importlib.util.find_spec("torchvision") is None:
        assert proc.video_processor is None


def test_undecodable_clip_fails_alone_in_a_batch(tmp_path, family_model, audio_set):
    """A clip that cannot be decoded is a failed prediction with the reason; the clips
    batched beside it are answered."""
    root, cl = audio_set
    bad = tmp_path / "audio"
    for c in cl:
        (bad / c.key).mkdir(parents=True)
        (bad / c.key / c.mp3name).symlink_to((root / c.relpath).resolve())
    broken = cl[0]
    (bad / broken.relpath).unlink()
    (bad / broken.relpath).write_bytes(b"ID3 this is not an mp3 stream")
    summary = run_inference(
        ModelSpec("run", "transformers", str(family_model("qwen2_5_omni")),
                  settings={"device": "cpu", "max_new_tokens": 2, "max_seconds": 8, "batch_size": 3}),
        load_prompt(),
        cl,
        out_dir=tmp_path / "o",
        audio_root=bad,
        options=RunOptions(cache_dir=None, concurrency=3, timeout_s=300, max_retries=0,
                           progress=False),
    )
    preds = read_predictions(tmp_path / "o" / "predictions.jsonl")
    assert summary["n_failed"] == 1
    assert preds[broken.key].status.value == "failed"
    assert "cannot decode" in preds[broken.key].error
    assert all(p.raw_reply is not None for k, p in preds.items() if k != broken.key)


@pytest.mark.parametrize("setting", ["batch_size=0", "batch_size=many", "batch_wait_s=-1"])
def test_bad_batch_setting_is_one_line_error(tmp_path, capsys, audio_set, setting):
    from agl.cli import main

    root, _ = audio_set
    rc = main(
        [
            "infer",
            "--backend",
            "transformers",
            "--model",
            str(tmp_path / "m"),
            "--manifest",
            str(root / "manifest.csv"),
            "--audio-root",
            str(root),
            "--out",
            str(tmp_path / "o"),
            "--no-progress",
            "--setting",
            setting,
        ]
    )
    err = capsys.readouterr().err.strip()
    # checked by the settings' rules before the run (issue 50), as the backend checks them
    key = setting.split("=")[0]
    assert rc == 2 and len(err.splitlines()) == 1 and f"{key}: " in err and " is not " in err, err


def test_gemma3n_window_matches_its_feature_extractor():
    """The table's 30 s window for Gemma-3n is its feature extractor's: 16 kHz, and nothing
    past 30 s reaches the model."""
    import numpy as np
    from tiny_models import _tokenizer
    from transformers import Gemma3nAudioFeatureExtractor, Gemma3nProcessor, SiglipImageProcessor

    from agl.backends._families import family, window_seconds

    named = {
        "audio_token": "<audio_soft_token>",
        "boa_token": "<start_of_audio>",
        "eoa_token": "<end_of_audio>",
        "image_token": "<image_soft_token>",
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
    }
    tok = _tokenizer(["<start_of_turn>", "<end_of_turn>", "<|im_end|>", *named.values()], named)
    fe = Gemma3nAudioFeatureExtractor()
    proc = Gemma3nProcessor(feature_extractor=fe, image_processor=SiglipImageProcessor(), tokenizer=tok)
    window = window_seconds(family("gemma3n"), proc, fe)
    assert fe.sampling_rate == 16000 and window == 30.0

    def frames(seconds: float) -> int:
        wave = np.zeros(int(seconds * 16000), dtype=np.float32)
        out = proc(text=["<audio_soft_token>"], audio=[wave], sampling_rate=16000, return_tensors="pt")
        return int(out["input_features_mask"].sum())

    assert frames(10) < frames(window) == frames(window + 10)


def test_gemma3n_loads_without_its_vision_tower(family_model):
    """Gemma-3n's checkpoint class builds a timm vision tower (MobileNet-V5; timm needs
    torchvision) even for audio. The backend leaves it out: the checkpoint's vision weights
    are skipped, the tower refuses to run, and AutoModel is left as it was."""
    import transformers

    from agl.backends.local_transformers import LocalTransformers

    before = transformers.AutoModel.__dict__.get("from_config")
    backend = LocalTransformers(str(family_model("gemma3n")), device="cpu")
    model, processor, config = backend._load()
    tower = model.model.vision_tower
    assert not list(tower.parameters())
    with pytest.raises(RuntimeError, match="gemma3n_vision sub-model was not loaded"):
        tower(pixel_values=None)
    assert model.model.audio_tower is not None and list(model.model.audio_tower.parameters())
    assert transformers.AutoModel.__dict__.get("from_config") is before


def test_sampling_is_repeated_by_its_seed(tmp_path, family_model, audio_set):
    """`do_sample` with a `seed` (the paper protocol's MiniCPM-o and Kimi-Audio settings):
    the same seed gives the same text clip for clip, another seed other text."""
    model_dir = family_model("qwen2_audio")
    texts = {}
    for run, seed in (("a", 7), ("b", 7), ("c", 8)):
        summary = _run(model_dir, audio_set, tmp_path / run, max_seconds=4, batch_size=3,
                       do_sample=True, temperature=1.0, seed=seed)
        assert summary["n_failed"] == 0
        preds = read_predictions(tmp_path / run / "predictions.jsonl")
        texts[run] = {k: p.raw_reply for k, p in preds.items()}
    assert texts["a"] == texts["b"]
    assert texts["a"] != texts["c"]


def test_a_30_s_family_hears_long_clips_in_windows(tmp_path, family_model, audio_set):
    """A tiny Qwen2-Audio (Whisper encoder, 30 s) with long_audio windows: every window of a
    real 128-s clip is a request of its own, heard whole (and the 3-s cut is one window);
    windows longer than the encoder are cut by the backend, and the record says how much of
    the clip was heard."""
    from agl.contracts.long_audio import parse_long_audio

    root, cl = audio_set
    cl = [c for c in cl if c.key in ("aporee_26839_30948", "short_cut")]  # 128 s and 3 s
    model_dir = family_model("qwen2_audio")

    def run(out, **long_audio):
        spec = ModelSpec("run", "transformers", str(model_dir), settings={"device": "cpu", "max_new_tokens": 2},
                         long_audio=parse_long_audio({"mode": "windows", **long_audio}, "test"))
        summary = run_inference(spec, load_prompt(), cl, out_dir=out, audio_root=root,
                                options=RunOptions(cache_dir=None, concurrency=2, timeout_s=300, max_retries=0,
                                                   progress=False))
        return summary, read_predictions(out / "predictions.jsonl")

    summary, preds = run(tmp_path / "w30", window_s=30)
    assert summary["n_failed"] == 0 and summary["n"] == 2
    for key, p in preds.items():
        wins, m = p.meta["windows"], p.meta
        assert all(w["end_s"] - w["start_s"] <= 30 and w["heard_s"] == round(w["end_s"] - w["start_s"], 3)
                   and w["truncated"] is False for w in wins), key
        assert m["heard_s"] == m["audio_s"] and wins[0]["start_s"] == 0 and wins[-1]["end_s"] == m["audio_s"]
        assert m["input_tokens"] == sum(w["input_tokens"] for w in wins)
        assert m["processor_truncation"] is True and m["transformers_version"]
    assert sorted(len(p.meta["windows"]) for p in preds.values()) == [1, 5]
    long_one = preds["aporee_26839_30948"]
    # 128 s: four full windows and an 8-s tail under min_tail_s, heard by sliding back
    tail = long_one.meta["windows"][-1]
    assert tail["end_s"] - tail["start_s"] == 30 and tail["end_s"] == long_one.meta["audio_s"]

    # multi_part: the same five windows as five audio parts of one prompt, one answer
    summary, parts = run(tmp_path / "mp", mode="multi_part", window_s=30)
    p = parts[long_one.sample_id]
    assert summary["n_failed"] == 0 and p.meta["long_audio"] == "multi_part" and "windows" not in p.meta
    assert p.meta["parts"] == [[w["start_s"], w["end_s"]] for w in long_one.meta["windows"]]
    assert p.meta["parts_heard_s"] == [30.0] * 5 and p.meta["heard_s"] == p.meta["audio_s"]
    assert p.meta["input_tokens"] > max(w["input_tokens"] for w in long_one.meta["windows"])
    assert parts["short_cut"].meta["parts"] == [[0.0, 3.0]]

    # 60-s windows for a 30-s encoder: the backend keeps 30 s of each, and says so
    _, preds = run(tmp_path / "w60", window_s=60)
    p = preds[long_one.sample_id]
    assert [w["heard_s"] for w in p.meta["windows"]] == [30.0, 30.0, 30.0]
    assert all(w["truncated"] for w in p.meta["windows"])
    assert p.meta["heard_s"] < p.meta["audio_s"] - 50


def test_a_reply_stopped_at_max_new_tokens_is_truncated(tmp_path, family_model, audio_set):
    """Generation that reaches `max_new_tokens` without an end token is cut at the output
    limit, as an API's finish_reason 'length': status truncated with that reason, counted
    apart in the summary, the text kept and asked once; a reply that ended is 'stop'."""
    summary = _run(family_model("qwen2_audio"), audio_set, tmp_path / "o", max_new_tokens=2,
                   max_seconds=4, batch_size=3)
    preds = read_predictions(tmp_path / "o" / "predictions.jsonl")
    cut = {k for k, p in preds.items() if p.status.value == "truncated"}
    assert cut and summary["n_truncated"] == len(cut) and summary["n_failed"] == 0
    for key, p in preds.items():
        m = p.meta
        assert m.get("attempts", 1) == 1 and p.raw_reply is not None
        if key in cut:
            assert m["finish_reason"] == "length" and m["output_tokens"] == 2
            assert "cut at the output limit (finish_reason length)" in p.error
        else:
            assert m["finish_reason"] == "stop" and p.status.value != "truncated"
