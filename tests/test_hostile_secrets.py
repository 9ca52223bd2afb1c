"""Credentials in URLs and in key-like settings (issue 24, "secrets outside the environment").

params.yaml and the command line refuse them in one line naming the field (never echoing
the value); a URL that must carry one comes from the variable `base_url_env` names, and
then its password, its Basic-auth form and its query key are scrubbed from everything the
run writes or prints, even when the server echoes them back.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest
from fake_llm import Answer, FakeServer, openai_completion
from test_inference_api import make_clips

from agl.cli import main
from agl.contracts.models import parse_models
from agl.core.secrets import check_config, known_secrets, scrub_text, strip_url_credentials
from agl.errors import AglError
from agl.inference.runspec import load_params

USER = "agl-user"
PW = "pw-PLANTED-5e1f0a9c77"
QK = "qk-PLANTED-90b3d2e4aa"
SETTING = "sk-PLANTED-setting-41c7"
BASIC = base64.b64encode(f"{USER}:{PW}".encode()).decode()
PLANTED = (PW, QK, BASIC, SETTING)
GOOD = ('{"reasoning": "blackbird", "city": "Berlin", "country": "Germany", '
        '"continent": "Europe", "latitude": 52.52, "longitude": 13.40}')


def secret_url(host: str = "127.0.0.1:9") -> str:
    return f"http://{USER}:{PW}@{host}/v1?api-key={QK}"


REFUSED = {
    "openai_api_key": ({"openai_api_key": SETTING}, "settings.openai_api_key"),
    "authorization-header": ({"http_options": {"headers": {"Authorization": f"Bearer {SETTING}"}}},
                             "settings.http_options.headers.Authorization"),
    "extra_body.api_key": ({"extra_body": {"api_key": SETTING}}, "settings.extra_body.api_key"),
    "x-api-key": ({"extra_headers": {"x-api-key": SETTING}}, "settings.extra_headers.x-api-key"),
    "userinfo": ({"base_url": f"http://{USER}:{PW}@h:8000/v1"}, "settings.base_url"),
    "token-as-user": ({"base_url": f"https://{PW}@h/v1"}, "settings.base_url"),
    "query-key": ({"base_url": f"http://h:8000/v1?api-key={QK}"}, "settings.base_url"),
    "replica-list": ({"base_url": ["http://a/v1", {"url": secret_url(), "concurrency": 2}]},
                     "settings.base_url[1].url"),
}


@pytest.mark.parametrize(("settings", "field"), REFUSED.values(), ids=REFUSED.keys())
def test_params_refuse_credentials_in_one_line_naming_the_field(settings, field):
    with pytest.raises(AglError) as err:
        parse_models({"served": {"backend": "openai-compatible", "model": "m",
                                 "settings": settings}})
    message = str(err.value)
    assert message.startswith(f"params.yaml: models.served.{field}: "), message
    assert "\n" not in message and ("api_key_env" in message or "base_url_env" in message)
    assert not any(p in message for p in PLANTED)


def test_a_credential_anywhere_in_params_yaml_is_refused(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(f"download:\n  base_url: https://{USER}:{PW}@mirror.example/files\n"
                      "models:\n  a: {backend: prior, model: c}\n")
    with pytest.raises(AglError, match=r"params.yaml: download.base_url: the URL carries"):
        load_params(params)
    params.write_text("models:\n  a: {backend: prior, model: c, settings: {api_key_env: K, "
                      "max_tokens: 5, tokenizer: t, authors: [a], temperature: 0}}\n")
    assert load_params(params)["models"]["a"]["settings"]["api_key_env"] == "K"  # names are fine


@pytest.mark.parametrize(
    "args",
    [
        ["--base-url", secret_url()],
        ["--base-url", "http://127.0.0.1:9/v1", "--base-url", secret_url()],
        ["--setting", f"extra_body={{api_key: {SETTING}}}"],
        ["--setting", f"base_url={secret_url()}"],
    ],
    ids=["base-url", "replica", "nested-key", "setting-url"],
)
def test_the_command_line_refuses_them_too(tmp_path, capfd, args):
    manifest, audio = make_clips(tmp_path, 1)
    rc = main(["infer", "--backend", "openai-compatible", "--model", "m", "--manifest",
               str(manifest), "--audio-root", str(audio), "--out", str(tmp_path / "run"),
               "--no-progress", *args])
    out, err = capfd.readouterr()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "api_key_env" in err and not any(p in out + err for p in PLANTED)
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


def test_url_credentials_are_stripped_from_any_text():
    text = (f"GET {secret_url()} failed; retry http://x/y?token={QK}&page=2 or "
            f"https://{PW}@git.example/r.git; keep https://h/p?q=1&lang=de")
    clean = strip_url_credentials(text)
    assert not any(p in clean for p in PLANTED)
    assert "http://[redacted]@127.0.0.1:9/v1?api-key=[redacted]" in clean
    assert "?token=[redacted]&page=2" in clean and "https://h/p?q=1&lang=de" in clean
    # From the environment: a proxy's password and a base URL's parts are known secrets.
    env = {"HTTPS_PROXY": f"http://{USER}:{PW}@proxy:3128", "SERVED_URL": secret_url()}
    found = known_secrets({"base_url_env": "SERVED_URL"}, env=env)
    assert {PW, QK, BASIC, secret_url()} <= set(found)
    assert scrub_text(f"pw {PW} basic {BASIC}", found) == "pw [redacted] basic [redacted]"
    check_config({"base_url_env": "SERVED_URL", "max_tokens": 9}, "x")  # nothing to refuse


def test_a_url_from_base_url_env_is_used_and_never_written(tmp_path, monkeypatch, capfd):
    """The server gets Basic auth and the query key, echoes both in replies and errors;
    nothing in the run folder, the cache, MLflow or the output holds them."""
    manifest, audio = make_clips(tmp_path, 3)
    for k in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(k)

    def answer(call):
        assert call.headers.get("Authorization") == f"Basic {BASIC}", call.headers
        assert call.path.endswith(f"?api-key={QK}"), call.path  # the query key travelled
        echo = f"{call.path} {call.headers['Authorization']} {PW}"
        if call.n == 1:
            return Answer(500, {"error": {"message": f"upstream said {echo}"}})
        reply = json.loads(GOOD) | {"reasoning": f"heard at {echo}"}
        return Answer(200, openai_completion(json.dumps(reply)), headers={"X-Echo": echo})

    with FakeServer(answer) as server:
        monkeypatch.setenv("SERVED_URL", secret_url(server.url.split("://")[1]))
        rc = main(["infer", "--backend", "openai-compatible", "--model", "m", "--manifest",
                   str(manifest), "--audio-root", str(audio), "--out", str(tmp_path / "run"),
                   "--cache-dir", str(tmp_path / "cache"), "--retries", "1", "--no-progress",
                   "--setting", "base_url_env=SERVED_URL", "--setting", "temperature=0"])
        assert rc == 0 and len(server.calls) == 4
    lines = (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["status"] == "ok" for x in lines)
    assert "[redacted]" in (tmp_path / "run" / "predictions.jsonl").read_text()
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["settings"]["base_url_env"] == "SERVED_URL"

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from agl.core.tracking import log_run

    log_run(run_key="served", run_name="served", experiment="secrets", params=summary,
            metrics={"n": summary["n"]}, artifacts=[tmp_path / "run"],
            tags={"echo": (tmp_path / "cache").as_posix()})
    out, err = capfd.readouterr()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "mlflow.db" for p in files) and any("cache" in p.parts for p in files)
    hits = [(p, s) for p in files for s in PLANTED if s.encode() in p.read_bytes()]
    assert hits == [], hits
    assert not any(s in out + err for s in PLANTED), out + err


def test_no_traceback_at_exit_from_a_kept_scrubbing_stream():
    """An exit handler that kept the scrubbing wrapper (colorama's reset_all does: it writes
    unless the stream says it is closed) once wrote into the stream pytest had closed, and a
    traceback ended the suite's output."""
    code = (
        "import atexit, io, sys\n"
        "from agl.core.secrets import scrubbed_output\n"
        "inner = io.StringIO()\n"
        "sys.stdout = inner\n"
        "with scrubbed_output():\n"
        "    kept = sys.stdout\n"
        "def reset():\n"
        "    if not kept.closed:\n"
        "        kept.write('reset'); kept.flush()\n"
        "atexit.register(reset)\n"
        "inner.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_a_log_handler_bound_inside_the_cli_writes_to_the_current_stream_afterwards():
    """`import dvc` binds its log handlers to the sys.stdout of that moment. When that was the
    CLI's scrubbing wrapper around a stream since closed (pytest's capture file), DVC's next
    log line raised `LoggingException` (CI, `Repo.init` in a later test). A retired wrapper
    writes, still scrubbed, to the stream current at the time of the write."""
    code = (
        "import io, logging, sys\n"
        "from agl.core.secrets import scrubbed_output\n"
        "real, inner = sys.stdout, io.StringIO()\n"
        "sys.stdout = inner\n"
        "with scrubbed_output():\n"
        "    import dvc.repo  # noqa: F401  (binds DVC's handlers to the wrapper)\n"
        "inner.close()\n"
        "sys.stdout = real\n"
        "logging.getLogger('dvc').info('after ' + 'A' * 40)\n"
    )
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "AGL_PLANTED_API_KEY": "A" * 40}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("after ") and "A" * 40 not in done.stdout, done.stdout


def test_reading_the_environment_survives_a_thread_unsetting_a_variable():
    """MLflow's telemetry thread unsets a variable as a process ends; a scrub reading the
    environment then (a stage's one-line error on its way out) once died with KeyError."""
    import threading
    import time

    from agl.core.secrets import known_secrets

    stop = threading.Event()

    def toggle():
        while not stop.is_set():
            os.environ["_AGL_TEST_TOGGLED"] = "x" * 24
            os.environ.pop("_AGL_TEST_TOGGLED", None)

    thread = threading.Thread(target=toggle, daemon=True)
    thread.start()
    try:
        calls, t0 = 0, time.monotonic()
        while calls < 3000 and time.monotonic() - t0 < 5:
            known_secrets()  # raised KeyError about once in 600 calls before the snapshot
            calls += 1
    finally:
        stop.set()
        thread.join()
