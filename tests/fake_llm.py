"""A fake Gemini / OpenAI server on 127.0.0.1 for the real SDK clients.

Each request is decoded (the audio it carries, hashed; the prompt text; the path and
headers) and recorded; a test's `answer(call) -> Answer` function decides the reply. An
answer with `hold=True` is kept open until the server stops (a slow reply: the client's
timeout must fire first). Nothing sleeps.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Call:
    path: str
    headers: dict[str, str]
    body: Any
    audio_sha256: list[str]
    prompt: str
    n: int  # 1-based arrival number
    method: str = "POST"
    raw: bytes = b""


@dataclass
class Answer:
    status: int = 200
    body: Any = None  # dict -> JSON; str/bytes sent as is
    headers: dict[str, str] = field(default_factory=dict)
    hold: bool = False
    delay_s: float = 0.0  # only the benchmark uses a fixed latency
    drop: bool = False  # close the connection without a reply (a server that died)


def openai_completion(text: str | None, *, refusal: str | None = None,
                      finish: str = "stop", tokens: tuple[int, int] = (120, 30)) -> dict:
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake",
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": text, "refusal": refusal}}],
        "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1],
                  "total_tokens": sum(tokens)},
    }


def gemini_response(text: str | None, *, finish: str = "STOP",
                    tokens: tuple[int, int] = (120, 30), thoughts: int = 0) -> dict:
    content = {"role": "model", "parts": [{"text": text}] if text is not None else []}
    return {
        "candidates": [{"content": content, "finishReason": finish, "index": 0}],
        "usageMetadata": {"promptTokenCount": tokens[0], "candidatesTokenCount": tokens[1],
                          "thoughtsTokenCount": thoughts,
                          "totalTokenCount": tokens[0] + tokens[1] + thoughts},
    }


def _b64(data: str) -> bytes:
    """Standard or URL-safe base64, padded or not (google-genai sends URL-safe, unpadded)."""
    data = data + "=" * (-len(data) % 4)
    return base64.urlsafe_b64decode(data.replace("+", "-").replace("/", "_"))


def _audio_and_prompt(body: Any) -> tuple[list[str], str]:
    audio, texts = [], []
    if not isinstance(body, dict):
        return audio, ""
    for msg in body.get("messages", []):  # OpenAI chat completions
        content = msg.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for part in content or []:
            if part.get("type") == "input_audio":
                data = _b64(part["input_audio"]["data"])
                audio.append(hashlib.sha256(data).hexdigest())
            elif part.get("type") == "text":
                texts.append(part["text"])
    for c in body.get("contents", []):  # Gemini generateContent
        for part in c.get("parts", []):
            inline = part.get("inlineData") or part.get("inline_data")
            if inline:
                audio.append(hashlib.sha256(_b64(inline["data"])).hexdigest())
            elif "text" in part:
                texts.append(part["text"])
    return audio, "\n".join(texts)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # listen() backlog: the default 5 drops bursts of connections


class FakeServer:
    def __init__(self, answer: Callable[[Call], Answer], port: int = 0):
        self.answer = answer
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms delayed-ACK stalls on small replies

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802
                self.do_POST()

            def do_DELETE(self) -> None:  # noqa: N802
                self.do_POST()

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    body = None
                audio, prompt = _audio_and_prompt(body)
                with server._lock:
                    call = Call(self.path, dict(self.headers), body, audio, prompt,
                                len(server.calls) + 1, self.command, raw)
                    server.calls.append(call)
                ans = server.answer(call)
                if ans.hold:
                    server._release.wait(60)
                    return
                if ans.drop:
                    self.close_connection = True
                    return
                if ans.delay_s:
                    time.sleep(ans.delay_s)
                payload = ans.body
                if isinstance(payload, dict | list):
                    data, ctype = json.dumps(payload).encode(), "application/json"
                elif isinstance(payload, str):
                    data, ctype = payload.encode(), "application/json"
                else:
                    data, ctype = payload or b"", "application/json"
                try:
                    self.send_response(ans.status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in ans.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._httpd = _Server(("127.0.0.1", port), Handler)  # port: 0 picks a free one
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving from inside a handler (a replica going down mid-run): later
        connections are refused."""
        threading.Thread(target=self.__exit__, daemon=True).start()

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def calls_for(self, audio_sha256: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if audio_sha256 in c.audio_sha256]
