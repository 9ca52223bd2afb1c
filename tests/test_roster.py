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
