"""Fake OpenAI and Gemini batch services on 127.0.0.1, for the real openai / google-genai SDKs.

The routes are the ones the SDKs call (read from their source, openai 3.x and google-genai
3.x), following each provider's documented batch API:

OpenAI (base_url .../v1): POST /files (multipart, purpose=batch), GET /files/{id}/content,
  DELETE /files/{id}; POST /batches, GET /batches/{id}, POST /batches/{id}/cancel,
  GET /batches (newest first); POST /chat/completions (the synchronous path).
  A finished job has an output file (answered requests) and an error file (non-200
  responses, and `batch_expired` for what an expired job never ran).
Gemini (base_url ..., api_version v1beta): the Files API's resumable upload
  (POST /upload/v1beta/files, then the session URL), GET/DELETE /v1beta/files/{id},
  GET /v1beta/files/{id}:download; POST /v1beta/models/{m}:batchGenerateContent,
  GET /v1beta/batches/{id}, POST /v1beta/batches/{id}:cancel, GET /v1beta/batches;
  POST /v1beta/models/{m}:generateContent (synchronous). Inline requests get inline
  responses; a request file gets a responses file.

Each request (batch or synchronous) is answered by the test's `answer(req) -> Result`,
where `req` carries its custom id, body, prompt and the SHA-256 of the audio it carries
(inline, or a Files API upload it references). `billed` counts answered requests per
audio hash: a clip paid twice shows as 2. `plan(job)` sets a new job's fate: how many
polls until it finishes, and whether it completes, expires, fails or never finishes.
Output lines come in a shuffled order: results must be matched by id. `tamper(job, rows)`
may rewrite a finished job's result entries (OpenAI: the output file's lines; Gemini: the
inline responses or the responses file's lines) as a broken provider would: any JSON value,
or bytes for a line that is not JSON.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class BatchRequest:
    custom_id: str | None  # None: a synchronous call
    body: Any
    audio_sha256: list[str]
    prompt: str


@dataclass
class Result:
    body: dict | None = None  # a chat.completion (OpenAI) or GenerateContentResponse (Gemini)
    error: tuple[int, str] | None = None  # a failed request: (HTTP code, message)


@dataclass
class FakeJob:
    id: str
    api: str
    tag: str
    requests: list[BatchRequest]
    created: int
    inline: bool = False
    input_file: str | None = None
    input_bytes: int = 0  # the request file's size (it is deleted once the job is done)
    state: str = "validating"
    polls: int = 0
    ready_after: int = 1  # it finishes on this poll
    fate: str = "complete"  # complete | expire | fail | hang
    answered_before_end: int = 0  # expire / cancel: requests answered before it stopped
    fail_message: str = "the batch failed validation"
    cancel_requested: bool = False
    output: dict = field(default_factory=dict)


def _b64(data: str) -> bytes:
    data = data + "=" * (-len(data) % 4)
    return base64.urlsafe_b64decode(data.replace("+", "-").replace("/", "_"))


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class FakeBatchService:
    def __init__(self, answer: Callable[[BatchRequest], Result],
                 plan: Callable[[FakeJob], None] | None = None):
        self.answer = answer
        self.plan = plan or (lambda job: None)
        self.jobs: dict[str, FakeJob] = {}
        self.files: dict[str, dict[str, Any]] = {}  # id -> {data, mime, purpose}
        self.billed: Counter = Counter()
        self.calls: list[tuple[str, str]] = []
        # Everything that arrived, as it arrived: (method, path, headers, body bytes).
        self.wire: list[tuple[str, str, dict[str, str], bytes]] = []
        self.sync_requests: list[BatchRequest] = []  # the synchronous calls, as received
        self.reject_create: tuple[int, str] | None = None
        self.tamper: Callable[[FakeJob, list], list] | None = None
        self.hold_create_at: int | None = None  # the n-th create is made, never answered
        self.creates = 0
        self._sessions: dict[str, dict[str, Any]] = {}
        self._lock = threading.RLock()
        self._release = threading.Event()
        self._n = 0
        self._rng = random.Random(7)
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _go(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with service._lock:
                    service.calls.append((self.command, self.path))
                    service.wire.append((self.command, self.path, dict(self.headers), raw))
                status, body, headers = service._route(self.command, self.path,
                                                       dict(self.headers), raw)
                if status is None:  # held: the client waits until the service stops
                    service._release.wait(120)
                    return
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_DELETE = _go  # noqa: N815

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.request_queue_size = 256
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeBatchService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n:05d}"

    # --- shared ----------------------------------------------------------------------------

    def submitted(self) -> Counter:
        """How many jobs each custom id was submitted in."""
        return Counter(r.custom_id for j in self.jobs.values() for r in j.requests)

    def _answer(self, req: BatchRequest) -> Result:
        res = self.answer(req)
        if res.body is not None:
            for sha in req.audio_sha256 or [req.custom_id]:
                self.billed[sha] += 1
        return res

    def _route(self, method: str, path: str, headers: dict, raw: bytes):
        parts = urlsplit(path)
        p, query = parts.path, parse_qs(parts.query)
        body = None
        if raw and "multipart" not in headers.get("Content-Type", ""):
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                body = None
        with self._lock:
            if p.startswith("/v1/"):
                return self._openai(method, p[3:], query, headers, raw, body)
            return self._gemini(method, p, query, headers, raw, body)

    def _finish(self, job: FakeJob) -> list[tuple[BatchRequest, Result | None]]:
        """Each request's result as the job ends (None: never run)."""
        if job.fate == "fail" and not job.cancel_requested:
            return []
        n = len(job.requests) if job.fate == "complete" and not job.cancel_requested \
            else job.answered_before_end
        out = [(r, self._answer(r) if i < n else None) for i, r in enumerate(job.requests)]
        self._rng.shuffle(out)  # results are matched by id, never by position
        return out

    def _advance(self, job: FakeJob) -> bool:
        """One poll; True when the job ends on it."""
        job.polls += 1
        if job.cancel_requested:
            return True
        return job.fate != "hang" and job.polls >= job.ready_after

    # --- OpenAI ----------------------------------------------------------------------------

    def _openai(self, method, p, query, headers, raw, body):
        if p == "/chat/completions":
            req = BatchRequest(None, body, *_openai_audio(body))
            self.sync_requests.append(req)
            res = self._answer(req)
            if res.error:
                return res.error[0], {"error": {"message": res.error[1]}}, {}
            return 200, res.body, {}
        if p == "/files" and method == "POST":
            form = _multipart(headers["Content-Type"], raw)
            fid = self._id("file-")
            self.files[fid] = {"data": form["file"], "purpose": form.get("purpose", b"").decode()}
            return 200, {"id": fid, "object": "file", "bytes": len(form["file"]),
                         "created_at": int(time.time()), "filename": "requests.jsonl",
                         "purpose": "batch", "status": "processed"}, {}
        if p.startswith("/files/"):
            fid = p.split("/")[2]
            if fid not in self.files:
                return 404, {"error": {"message": f"no file {fid}"}}, {}
            if method == "DELETE":
                del self.files[fid]
                return 200, {"id": fid, "object": "file", "deleted": True}, {}
            return 200, self.files[fid]["data"], {}
        if p == "/batches" and method == "POST":
            return self._openai_create(body)
        if p == "/batches" and method == "GET":
            jobs = sorted((j for j in self.jobs.values() if j.api == "openai"),
                          key=lambda j: j.id, reverse=True)
            return 200, {"object": "list", "data": [self._openai_batch(j) for j in jobs],
                         "has_more": False}, {}
        if p.startswith("/batches/"):
            job = self.jobs.get(p.split("/")[2])
            if job is None:
                return 404, {"error": {"message": "no such batch"}}, {}
            if p.endswith("/cancel"):
                if job.state in ("validating", "in_progress"):
                    job.cancel_requested, job.state = True, "cancelling"
                return 200, self._openai_batch(job), {}
            if job.state in ("validating", "in_progress", "cancelling") and self._advance(job):
                self._openai_end(job)
            elif job.state == "validating":
                job.state = "in_progress"
            return 200, self._openai_batch(job), {}
        return 404, {"error": {"message": f"no route {method} {p}"}}, {}

    def _openai_create(self, body):
        self.creates += 1
        if self.reject_create:
            return self.reject_create[0], {"error": {"message": self.reject_create[1]}}, {}
        lines = self.files[body["input_file_id"]]["data"].splitlines()
        requests = []
        for line in lines:
            d = json.loads(line)
            assert d["method"] == "POST" and d["url"] == body["endpoint"] == "/v1/chat/completions"
            requests.append(BatchRequest(d["custom_id"], d["body"], *_openai_audio(d["body"])))
        assert len({r.custom_id for r in requests}) == len(requests), "custom ids repeat"
        job = FakeJob(self._id("batch_"), "openai", body["metadata"]["agl_job"], requests,
                      int(time.time()), input_file=body["input_file_id"],
                      input_bytes=len(self.files[body["input_file_id"]]["data"]))
        self.plan(job)
        self.jobs[job.id] = job
        if self.creates == self.hold_create_at:
            return None, None, None
        return 200, self._openai_batch(job), {}

    def _openai_end(self, job: FakeJob) -> None:
        done = self._finish(job)
        out, err = [], []
        for req, res in done:
            line = {"id": self._id("batch_req_"), "custom_id": req.custom_id}
            if res is None:
                err.append({**line, "response": None, "error": {
                    "code": "batch_expired",
                    "message": "This request could not be executed before the completion "
                               "window expired."}})
            elif res.error:
                err.append({**line, "error": None, "response": {
                    "status_code": res.error[0], "request_id": "r",
                    "body": {"error": {"message": res.error[1], "type": "invalid_request_error"}}}})
            else:
                out.append({**line, "error": None,
                            "response": {"status_code": 200, "request_id": "r", "body": res.body}})
        if self.tamper is not None:
            out = self.tamper(job, out)
        for name, rows in (("output", out), ("error", err)):
            if rows:
                fid = self._id("file-")
                self.files[fid] = {"data": _jsonl(rows), "purpose": "batch_output"}
                job.output[name] = fid
        job.output["counts"] = {"total": len(job.requests), "completed": len(out),
                                "failed": len(err)}
        job.state = "cancelled" if job.cancel_requested else {
            "complete": "completed", "expire": "expired", "fail": "failed"}[job.fate]

    def _openai_batch(self, job: FakeJob) -> dict:
        counts = job.output.get("counts") or {"total": len(job.requests), "completed": 0,
                                              "failed": 0}
        errors = None
        if job.state == "failed":
            errors = {"object": "list", "data": [{"code": "invalid_request",
                                                  "message": job.fail_message, "line": 1}]}
        return {"id": job.id, "object": "batch", "endpoint": "/v1/chat/completions",
                "errors": errors, "input_file_id": job.input_file, "completion_window": "24h",
                "status": job.state, "output_file_id": job.output.get("output"),
                "error_file_id": job.output.get("error"), "created_at": job.created,
                "expires_at": job.created + 86400, "request_counts": counts,
                "metadata": {"agl_job": job.tag}}

    # --- Gemini ----------------------------------------------------------------------------

    def _gemini(self, method, p, query, headers, raw, body):
        if p.startswith("/upload/") and headers.get("X-Goog-Upload-Command", "").startswith("start"):
            sid = self._id("s")
            meta = (body or {}).get("file") or {}
            self._sessions[sid] = {"data": b"", "mime": meta.get("mimeType") or meta.get("mime_type")}
            return 200, {}, {"X-Goog-Upload-URL": f"{self.url}/upload-session/{sid}",
                             "X-Goog-Upload-Status": "active"}
        if p.startswith("/upload-session/"):
            session = self._sessions[p.rsplit("/", 1)[1]]
            session["data"] += raw
            if "finalize" not in headers.get("X-Goog-Upload-Command", ""):
                return 200, {}, {"X-Goog-Upload-Status": "active"}
            fid = self._id("f")
            self.files[fid] = {"data": session["data"], "mime": session["mime"]}
            return 200, {"file": self._gemini_file(fid)}, {"X-Goog-Upload-Status": "final"}
        if p.startswith("/v1beta/files/") or p.startswith("/download/v1beta/files/"):
            name = p.split("/files/", 1)[1]
            fid = name.split(":")[0]
            if fid not in self.files:
                return 404, {"error": {"code": 404, "message": "no such file",
                                       "status": "NOT_FOUND"}}, {}
            if name.endswith(":download"):
                return 200, self.files[fid]["data"], {}
            if method == "DELETE":
                del self.files[fid]
                return 200, {}, {}
            return 200, self._gemini_file(fid), {}
        if p.endswith(":generateContent"):
            req = BatchRequest(None, body, *self._gemini_audio(body))
            self.sync_requests.append(req)
            res = self._answer(req)
            if res.error:
                return res.error[0], {"error": {"code": res.error[0], "message": res.error[1],
                                                "status": "INVALID_ARGUMENT"}}, {}
            return 200, res.body, {}
        if p.endswith(":batchGenerateContent"):
            return self._gemini_create(p, body)
        if p == "/v1beta/batches" and method == "GET":
            jobs = [self._gemini_op(j) for j in self.jobs.values() if j.api == "gemini"]
            return 200, {"operations": jobs}, {}
        if p.startswith("/v1beta/batches/"):
            name = p.split("/batches/", 1)[1]
            job = self.jobs.get(name.split(":")[0])
            if job is None:
                return 404, {"error": {"code": 404, "message": "no such batch",
                                       "status": "NOT_FOUND"}}, {}
            if name.endswith(":cancel"):
                if job.state in ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING"):
                    job.cancel_requested = True
                return 200, {}, {}
            if job.state in ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING") and self._advance(job):
                self._gemini_end(job)
            elif job.state == "BATCH_STATE_PENDING":
                job.state = "BATCH_STATE_RUNNING"
            return 200, self._gemini_op(job), {}
        return 404, {"error": {"code": 404, "message": f"no route {method} {p}",
                               "status": "NOT_FOUND"}}, {}

    def _gemini_file(self, fid: str) -> dict:
        f = self.files[fid]
        now = time.time()
        return {"name": f"files/{fid}", "uri": f"{self.url}/v1beta/files/{fid}",
                "mimeType": f.get("mime") or "application/octet-stream",
                "sizeBytes": str(len(f["data"])), "state": "ACTIVE", "createTime": _iso(now),
                "expirationTime": _iso(now + 48 * 3600)}

    def _gemini_audio(self, request: dict) -> tuple[list[str], str]:
        audio, texts = [], []
        for c in request.get("contents", []):
            for part in c.get("parts", []):
                inline = part.get("inlineData") or part.get("inline_data")
                ref = part.get("fileData") or part.get("file_data")
                if inline:
                    audio.append(hashlib.sha256(_b64(inline["data"])).hexdigest())
                elif ref:
                    fid = (ref.get("fileUri") or ref.get("file_uri")).rsplit("/", 1)[1]
                    audio.append(hashlib.sha256(self.files[fid]["data"]).hexdigest())
                elif "text" in part:
                    texts.append(part["text"])
        return audio, "\n".join(texts)

    def _gemini_create(self, p: str, body: dict):
        self.creates += 1
        if self.reject_create:
            return self.reject_create[0], {"error": {"code": self.reject_create[0],
                                                     "message": self.reject_create[1],
                                                     "status": "INVALID_ARGUMENT"}}, {}
        batch = body["batch"]
        cfg = batch["inputConfig"]
        if "requests" in cfg:
            items = [(r["metadata"]["key"], r["request"]) for r in cfg["requests"]["requests"]]
            inline, source = True, None
        else:
            source = cfg["fileName"].split("/", 1)[1]
            lines = self.files[source]["data"].splitlines()
            items = [(d["key"], d["request"]) for d in map(json.loads, lines)]
            inline = False
        requests = [BatchRequest(k, r, *self._gemini_audio(r)) for k, r in items]
        assert len({r.custom_id for r in requests}) == len(requests), "keys repeat"
        job = FakeJob(self._id("b"), "gemini", batch["displayName"], requests, int(time.time()),
                      inline=inline, input_file=source, state="BATCH_STATE_PENDING")
        self.plan(job)
        self.jobs[job.id] = job
        if self.creates == self.hold_create_at:
            return None, None, None
        return 200, self._gemini_op(job), {}

    def _gemini_end(self, job: FakeJob) -> None:
        rows = []
        for req, res in self._finish(job):
            if res is None:
                continue  # an expired or cancelled job returns nothing for what it never ran
            if res.error:
                rows.append({"key": req.custom_id,
                             "error": {"code": res.error[0], "message": res.error[1]}})
            else:
                rows.append({"key": req.custom_id, "response": res.body})
        if job.inline:
            rows = [{"metadata": {"key": r.pop("key")}, **r} for r in rows]
        if self.tamper is not None:
            rows = self.tamper(job, rows)
        if job.inline:
            job.output = {"inlinedResponses": {"inlinedResponses": rows}}
        elif rows:
            fid = self._id("f")
            self.files[fid] = {"data": _jsonl(rows), "mime": "application/jsonl"}
            job.output = {"responsesFile": f"files/{fid}"}
        job.state = "BATCH_STATE_CANCELLED" if job.cancel_requested else {
            "complete": "BATCH_STATE_SUCCEEDED", "expire": "BATCH_STATE_EXPIRED",
            "fail": "BATCH_STATE_FAILED"}[job.fate]

    def _gemini_op(self, job: FakeJob) -> dict:
        meta = {"@type": "type.googleapis.com/google.ai.generativelanguage.v1beta."
                         "GenerateContentBatch",
                "model": "models/fake", "displayName": job.tag, "state": job.state,
                "createTime": _iso(job.created), "updateTime": _iso(time.time())}
        done = job.state not in ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING")
        if done and job.output:
            meta["output"] = job.output
        op = {"name": f"batches/{job.id}", "metadata": meta, "done": done}
        if job.state == "BATCH_STATE_FAILED":
            op["error"] = {"code": 400, "message": job.fail_message}
        return op


def _jsonl(rows: list) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n"
                    for r in rows)


def _openai_audio(body: dict) -> tuple[list[str], str]:
    audio, texts = [], []
    for msg in body.get("messages", []):
        content = msg.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for part in content or []:
            if part.get("type") == "input_audio":
                audio.append(hashlib.sha256(_b64(part["input_audio"]["data"])).hexdigest())
            elif part.get("type") == "text":
                texts.append(part["text"])
    return audio, "\n".join(texts)


def _multipart(content_type: str, raw: bytes) -> dict[str, bytes]:
    msg = BytesParser().parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
    return {part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
            for part in msg.get_payload()}
