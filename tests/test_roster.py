"""The roster: all 16 paper models, each a valid `models:` entry meeting its paper row."""

from __future__ import annotations

import csv

from agl.backends.base import available_backends
from agl.inference.roster import load_roster


def test_roster_covers_the_papers_leaderboard(shared):
    with open(shared("data/agl1k/paper_leaderboard.csv"), encoding="utf-8") as fh:
        paper = {r["model"] for r in csv.DictReader(fh) if r["source"] != "baseline"}
    roster = load_roster()
    assert len(paper) == 16 and {r.spec.paper_name for r in roster} == paper
    backends = set(available_backends())
    for r in roster:
        assert r.spec.backend in backends, r.spec.name
        assert r.spec.prompt == "agl1k-paper"
        # What it needs is stated: a key for services, GPU memory for open models, and a
        # server command for those served over an OpenAI-compatible endpoint.
        if r.spec.backend in ("gemini", "openai"):
            assert r.key and r.spec.price_in_per_m >= 0
        else:
            assert r.gpu_gb and r.gpu_gb > 0
        if r.spec.backend == "openai-compatible":
            assert r.server and r.spec.settings.get("base_url", "").startswith("http")


def test_agl_models_lists_and_prints_entries(capsys):
    from agl.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "Qwen2.5-Omni" in out and "vllm serve openbmb/MiniCPM-o-2_6" in out
    assert main(["models", "--yaml", "phi-4-multimodal"]) == 0
    assert "paper_name: Phi-4-MM1" in capsys.readouterr().out
    assert main(["models", "--yaml", "nope"]) == 2
    assert "known:" in capsys.readouterr().err


def test_agl_models_says_what_each_model_hears_of_a_long_clip(capsys):
    """Per-family defaults (issue 45): APIs hear the whole clip, the omni families too (their
    processor truncation off), Gemma-3n its first 30 s (a 30-s encoder, as the paper); the paper
    protocol's Qwen2.5-Omni switches truncation on, as the authors' call left it."""
    from agl.cli import main

    assert main(["models"]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        name = line.split(" ", 1)[0]
        if name and "hears " in line:
            rows[name] = line.rsplit("hears ", 1)[1]
        elif line.startswith(" " * 20) and "hears " in line and rows:
            rows[list(rows)[-1] + ":paper"] = line.rsplit("hears ", 1)[1]
    assert rows["gemini-25-flash"] == "whole clip" and rows["gpt-4o-audio-preview"] == "whole clip"
    assert rows["qwen25-omni"] == rows["qwen3-omni"] == "whole clip (processor truncation off)"
    assert rows["qwen25-omni:paper"] == "first window (processor truncation on)"
    assert rows["gemma-3n-e4b-it"] == "first 30 s (processor truncation on, as the paper)"
    assert rows["phi-4-multimodal"] == "whole clip (no limit)"
    assert rows["kimi-audio"] == "whole file, as the server takes it"
    fams = {r.spec.name: r.family for r in load_roster() if r.spec.backend == "transformers"}
    assert fams == {"qwen3-omni": "qwen3_omni_moe", "qwen25-omni": "qwen2_5_omni",
                    "gemma-3n-e4b-it": "gemma3n", "phi-4-multimodal": "phi4_multimodal"}


def test_thinking_models_have_their_thinking_pinned_and_room_above_it(capsys):
    """Controlled protocol: a Gemini 2.5 / 3 model pins its thinking (budget or level) and an
    output limit above the budget (thinking counts against it); `agl models` shows both."""
    import pytest

    from agl.cli import main
    from agl.errors import AglError
    from agl.inference.roster import load_roster, room_to_think

    by_name = {r.spec.name: r.spec.settings for r in load_roster(protocol="controlled")}
    for name in ("gemini-25-pro", "gemini-25-flash"):
        s = by_name[name]
        assert s["max_output_tokens"] > s["thinking_budget"] > 0, name
    assert by_name["gemini-3-pro"]["thinking_level"] == "high"
    assert all(s.get("max_output_tokens") or s.get("max_tokens") or s.get("max_new_tokens")
               for s in by_name.values() if s.get("temperature") == 0)
    with pytest.raises(AglError, match="not above thinking_budget 512"):
        room_to_think({"thinking_budget": 512, "max_output_tokens": 512}, "roster")
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "max_output_tokens 2560, thinking_budget 2048" in out and "thinking_level high" in out
