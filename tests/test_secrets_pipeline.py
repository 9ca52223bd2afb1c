"""Issue 24's acceptance for secrets: a real `dvc repro` of the demo pipeline with an extra
openai-compatible model served by a fake server on 127.0.0.1 (on a copy of the session's
built demo, conftest.built_demo: only the new model's stages and what reads them run).

Planted: a password in the base URL's userinfo and a key in its query, and a key-like
setting (`extra_body.api_key`). params.yaml with either is refused in one line naming the
field; the run then goes ahead with the URL in the variable `base_url_env` names, against a
server that checks it got both credentials and echoes them in its replies and errors. No
trace of any planted value is left in build/, metrics/, mlruns/, mlflow.db, .dvc/ (cache and
run cache), dvc.lock, cache/ or the captured output.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from fake_llm import Answer, FakeServer, openai_completion
from helpers import copy_built_demo
from test_hostile_secrets import BASIC, GOOD, PLANTED, PW, QK, SETTING, secret_url

pytestmark = pytest.mark.slow
TARGETS = "report track"  # and everything before them: the leaderboard, evaluate, MLflow


def repro(work: Path, env: dict, outputs: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(f"dvc repro {TARGETS}", cwd=work, env=env, shell=True,
                          capture_output=True, text=True, timeout=900)
    outputs.append(done.stdout + done.stderr)
    return done


def test_planted_credentials_are_refused_then_leave_no_trace(built_demo, tmp_path):
    demo = copy_built_demo(built_demo, tmp_path)
    work = demo.work
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["models"]["served"] = {"backend": "openai-compatible", "model": "Qwen/Qwen2-Audio",
                                  "settings": {"temperature": 0}}
    assert params["infer"]["max_retries"] >= 1  # the first call's 500 is retried
    # No keys; MLflow on a database inside the folder searched for traces; the fake server
    # on 127.0.0.1 is reached directly (any other host would go to a dead proxy).
    env = {**demo.env, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}",
           "NO_PROXY": "127.0.0.1,localhost"}
    outputs: list[str] = []

    def answer(call):
        assert call.headers.get("Authorization") == f"Basic {BASIC}", call.headers
        assert call.path.endswith(f"?api-key={QK}"), call.path
        echo = f"{call.path} {call.headers['Authorization']} {PW}"
        if call.n == 1:  # an error body quoting them (the runner retries)
            return Answer(500, {"error": {"message": f"upstream said {echo}"}})
        reply = json.loads(GOOD) | {"reasoning": f"heard at {echo}"}
        return Answer(200, openai_completion(json.dumps(reply)), headers={"X-Echo": echo})

    with FakeServer(answer) as server:
        host = server.url.split("://")[1]
        served = params["models"]["served"]["settings"]

        # 1. The URL with userinfo and a query key in params.yaml: refused, one line.
        served["base_url"] = secret_url(host)
        (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        done = repro(work, env, outputs)
        assert done.returncode != 0
        refusals = [line for line in outputs[-1].splitlines() if "params.yaml: models." in line]
        assert refusals and set(refusals) == {refusals[0]}, outputs[-1]
        assert "params.yaml: models.served.settings.base_url: the URL carries a credential" \
            in refusals[0] and "base_url_env" in refusals[0]

        # 2. A key-like setting: refused, one line.
        served["base_url"] = server.url + "/v1"
        served["extra_body"] = {"api_key": SETTING}
        (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        done = repro(work, env, outputs)
        assert done.returncode != 0
        assert "params.yaml: models.served.settings.extra_body.api_key: a key-like setting" \
            in outputs[-1], outputs[-1]
        assert len(server.calls) == 0  # nothing ran with either

        # 3. The URL from the environment, the key-like setting removed: the run goes ahead.
        del served["base_url"], served["extra_body"]
        served["base_url_env"] = "AGL_SERVED_URL"
        (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        env["AGL_SERVED_URL"] = secret_url(host)
        done = repro(work, env, outputs)
        assert done.returncode == 0, outputs[-1]
        assert len(server.calls) == 33  # 32 demo clips, the first one asked twice

    preds = (work / "build/runs/served/predictions.jsonl").read_text().splitlines()
    assert len(preds) == 32 and "[redacted]" in "".join(preds)
    assert "served" in (work / "build/leaderboard.md").read_text()
    assert "served" in (work / "build/report/report.html").read_text()
    assert (work / "mlflow.db").exists() and (work / ".dvc/cache").is_dir()

    places = ["build", "metrics", "mlruns", "mlartifacts", "mlflow.db", ".dvc", "dvc.lock",
              "cache", "params.yaml"]
    files = [p for place in places for p in
             ([work / place] if (work / place).is_file() else (work / place).rglob("*"))
             if p.is_file()]
    assert len(files) > 100
    hits = [(str(p.relative_to(work)), s) for p in files for s in PLANTED if s.encode() in p.read_bytes()]
    assert hits == [], hits
    captured = "\n".join(outputs)
    assert not [s for s in PLANTED if s in captured], captured[-3000:]
