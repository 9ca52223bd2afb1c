"""OpenAI's Batch API for the `openai` backend (see agl.inference.batch and docs/batch.md).

A job is a JSONL file of `/v1/chat/completions` requests (`{custom_id, method, url, body}`,
the body exactly what `OpenAIChat.chat_request` gives the synchronous call, audio inline as
base64), uploaded with purpose `batch` and run with `completion_window: 24h`. Limits: 50,000
requests and 200 MB per file. The job carries `metadata: {agl_job: <tag>}`, so a job whose
creation was interrupted is found again by listing the account's batches.

Results: the output file holds the answered requests, the error file the failed ones (a
non-200 `response.status_code`, or `error` such as `batch_expired`); both are read, each
line matched by `custom_id`. An expired or cancelled job keeps what it finished.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
from openai._models import construct_type  # the SDK's own lenient reader
from openai.types.chat import ChatCompletion

from agl.backends.openai_chat import error_message, to_reply
from agl.backends.service import retryable_status
from agl.contracts.calls import Reply, Request
from agl.inference.batch.provider import (
    TRANSFER_TIMEOUT_S,
    BatchProvider,
    Chunk,
    Created,
    JobStatus,
    SubmitError,
    reply_or_error,
)
from agl.inference.batch.state import Job

ENDPOINT = "/v1/chat/completions"
_OUTCOME = {"completed": "completed", "failed": "failed", "expired": "expired",
            "cancelled": "cancelled"}
# Error codes of requests an expired or cancelled job never ran.
_NOT_RUN = ("batch_expired", "batch_cancelled")


class OpenAIBatch(BatchProvider):
    name = "openai"  # its entry in the index (agl.inference.batch.providers)

    def _client(self):
        return self.backend.get_client()

    async def line(self, request: Request) -> bytes:
        kw = await self.backend.chat_request(request)
        extra = kw.pop("extra_body", None) or {}
        body = {**kw, **extra}  # what the SDK sends: extra_body merges into the JSON body
        return json.dumps({"custom_id": request.sample_id, "method": "POST", "url": ENDPOINT,
                           "body": body}, ensure_ascii=False, separators=(",", ":")).encode()

    async def upload_input(self, chunk: Chunk) -> str | None:
        data = await asyncio.to_thread(chunk.path.read_bytes)
        try:
            async with asyncio.timeout(max(self.timeout_s, TRANSFER_TIMEOUT_S)):
                f = await self._client().files.create(
                    file=(chunk.path.name, data, "application/jsonl"), purpose="batch")
        except openai.APIStatusError as exc:
            raise SubmitError(f"request file upload: openai {exc.status_code}: {error_message(exc)}",
                              rejected=not retryable_status(exc.status_code)) from None
        except (openai.APIError, TimeoutError, OSError) as exc:
            raise SubmitError(f"request file upload: {type(exc).__name__}: {exc}") from None
        return f.id

    async def create(self, chunk: Chunk, input_ref: str | None, tag: str) -> Created:
        try:
            async with asyncio.timeout(self.timeout_s):
                b = await self._client().batches.create(
                    input_file_id=input_ref, endpoint=ENDPOINT, completion_window="24h",
                    metadata={"agl_job": tag})
        except openai.APIStatusError as exc:
            raise SubmitError(f"openai {exc.status_code}: {error_message(exc)}",
                              rejected=not retryable_status(exc.status_code)) from None
        except (openai.APIError, TimeoutError, OSError) as exc:
            raise SubmitError(f"{type(exc).__name__}: {exc}", ambiguous=True) from None
        return Created(b.id, float(b.expires_at) if b.expires_at else None)

    async def find(self, job: Job) -> str | None:
        async with asyncio.timeout(self.timeout_s * 4):
            async for b in self._client().batches.list(limit=100):  # newest first
                if (b.metadata or {}).get("agl_job") == job.tag:
                    return b.id
                if b.created_at < job.created - 3600:  # older than our record: not there
                    break
        return None

    async def status(self, job: Job) -> JobStatus:
        async with asyncio.timeout(self.timeout_s):
            b = await self._client().batches.retrieve(job.job_id)
        errors = [e for e in ((b.errors.data or []) if b.errors else [])]
        error = "; ".join(f"{e.code or 'error'}: {e.message or ''}".strip() for e in errors[:3])
        counts = {}
        if b.request_counts is not None:
            counts = {"total": b.request_counts.total, "completed": b.request_counts.completed,
                      "failed": b.request_counts.failed}
        return JobStatus(b.status, _OUTCOME.get(b.status), error or None, counts,
                         float(b.expires_at) if b.expires_at else None, raw=b)

    def result_files(self, status: JobStatus) -> list[str]:
        b = status.raw
        return [fid for fid in (b.output_file_id, b.error_file_id) if fid]  # answers first

    async def download(self, ref: str) -> bytes:
        return (await self._client().files.content(ref)).content

    def result_line(self, entry: dict[str, Any]) -> tuple[Any, Reply | str] | None:
        err = entry.get("error")
        if isinstance(err, dict) and err.get("code") in _NOT_RUN:
            return None  # never run: the job's own end (expired, cancelled) says why
        return entry.get("custom_id"), _one(entry)

    async def cancel(self, job: Job) -> None:
        async with asyncio.timeout(self.timeout_s):
            await self._client().batches.cancel(job.job_id)

    async def cleanup(self, job: Job, status: JobStatus | None) -> None:
        b = status.raw if status is not None else None
        ids = [job.input_ref] + ([b.output_file_id, b.error_file_id] if b is not None else [])
        for fid in ids:
            if not fid:
                continue
            try:
                async with asyncio.timeout(self.timeout_s):
                    await self._client().files.delete(fid)
            except Exception:  # noqa: BLE001 - batch files expire on their own (30 days)
                pass


def _one(d: dict[str, Any]) -> Reply | str:
    """One result line: the reply, read as the synchronous path reads a completion, or why
    the request failed."""
    err = d.get("error")
    if err:
        if isinstance(err, dict):
            return f"{err.get('code') or 'error'}: {err.get('message') or ''}".strip()
        return str(err)
    resp = d.get("response") or {}
    if not isinstance(resp, dict):
        return f"unreadable result (response: {str(resp)[:100]})"
    code, body = resp.get("status_code"), resp.get("body")
    if code != 200:
        message = body
        if isinstance(body, dict):
            inner = body.get("error", body)
            message = inner.get("message", inner) if isinstance(inner, dict) else inner
        return f"openai {code}: {str(message)[:300]}"
    return reply_or_error(
        lambda b: to_reply(construct_type(type_=ChatCompletion, value=b), "openai"), body)

