"""Gemini's Batch API (google-genai `batches`) for the `gemini` backend (see agl.inference.batch).

Audio goes in through the Files API (one upload per distinct clip, referenced by URI; an
uploaded file lives 48 h), the prompt and generation config exactly as the synchronous
`Gemini.generate` sends them (`Gemini.generation_config`, audio part first, then the prompt). A job's
requests go inline when they total at most `batch.inline_max_bytes` (the API takes up to
20 MB inline; results then come back inline), otherwise as a JSONL file uploaded through
the Files API (results come back as a file). Each request carries its sample id: `metadata:
{key}` inline, `key` in a file; results are matched by it, never by position.

The job's display name is its local tag, so a job whose creation was interrupted is found
by listing the project's batches. A finished job's audio uploads and request file are
deleted (best effort; they expire on their own).
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from typing import Any

from google.genai import _common, batches, errors, types

from agl.backends.base import BackendError, opaque_name, sent_audio
from agl.backends.gemini import to_reply
from agl.backends.service import retryable_status
from agl.contracts.calls import Reply, Request
from agl.core.audio import mime_type
from agl.inference.batch.provider import (
    TRANSFER_TIMEOUT_S,
    BatchProvider,
    Chunk,
    Created,
    JobStatus,
    Results,
    SubmitError,
    reply_or_error,
)
from agl.inference.batch.state import Job

FILE_LIFETIME_S = 48 * 3600.0
# An upload is reused only while it will outlive a job submitted now (the API expires a
# job after ~48 h): uploaded within the last 2 h. Older ones are uploaded again.
REUSE_MIN_LEFT_S = 46 * 3600.0
_OUTCOME = {"JOB_STATE_SUCCEEDED": "completed", "JOB_STATE_PARTIALLY_SUCCEEDED": "completed",
            "JOB_STATE_FAILED": "failed", "JOB_STATE_EXPIRED": "expired",
            "JOB_STATE_CANCELLED": "cancelled"}


class GeminiBatch(BatchProvider):
    name = "gemini"  # its entry in the index (agl.inference.batch.providers)

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self._inline: dict[str, Any] = {}  # sample id -> InlinedRequest (for inline jobs)

    def _client(self):
        return self.backend.get_client()

    # --- audio through the Files API ------------------------------------------------------

    async def prepare(self, requests: list[Request], save) -> dict[str, str]:
        now = time.time()
        need = {}
        for r in requests:
            up = self.state.uploads.get(r.audio_sha256 or "")
            if r.audio_path is not None and (up is None
                                             or up["expires_at"] - now < REUSE_MIN_LEFT_S):
                need[r.audio_sha256] = r
        semaphore = asyncio.Semaphore(self.concurrency)
        refused: dict[str, str] = {}

        async def one(sha: str, request: Request) -> None:
            async with semaphore:
                try:
                    self.state.uploads[sha] = await self._upload_audio(request)
                except SubmitError as exc:
                    if not exc.rejected:
                        raise
                    refused[sha] = str(exc)

        outcomes = await asyncio.gather(*(one(sha, p) for sha, p in need.items()),
                                        return_exceptions=True)
        save()  # what was uploaded is reused by the next pass
        for exc in outcomes:
            if isinstance(exc, BaseException):
                raise exc  # transient: every clip waits for the next pass
        return {r.sample_id: refused[r.audio_sha256] for r in requests
                if r.audio_sha256 in refused}

    async def _upload_audio(self, request: Request) -> dict[str, Any]:
        client = self._client()
        mime = mime_type(request.audio_path)
        what = f"clip {request.sample_id}"
        try:
            # The audio as the synchronous call sends it (no tags unless the protocol sends
            # them), as bytes under an opaque name: given a path, the SDK sends its base name.
            data = sent_audio(request)
        except BackendError as exc:
            raise SubmitError(f"audio of {what}: {exc}", rejected=True) from None
        try:
            async with asyncio.timeout(max(self.timeout_s, TRANSFER_TIMEOUT_S)):
                f = await client.aio.files.upload(file=io.BytesIO(data), config={
                    "mime_type": mime, "display_name": opaque_name(data)})
                for _ in range(120):  # audio is usually ACTIVE within seconds
                    if f.state is None or f.state.name != "PROCESSING":
                        break
                    await asyncio.sleep(1)
                    f = await client.aio.files.get(name=f.name)
        except errors.APIError as exc:
            code = exc.code if isinstance(exc.code, int) else None
            raise SubmitError(f"audio upload of {what}: gemini {code}: {exc.message}",
                              rejected=code is not None and not retryable_status(code)) from None
        except Exception as exc:  # network, timeout: the next pass uploads it again
            raise SubmitError(f"audio upload of {what}: {type(exc).__name__}: {exc}") from None
        if f.state is not None and f.state.name == "FAILED":
            raise SubmitError(f"audio upload of {what} failed on the server", rejected=True)
        expires = f.expiration_time.timestamp() if f.expiration_time else None
        return {"name": f.name, "uri": f.uri, "mime": f.mime_type or mime,
                "expires_at": expires or time.time() + FILE_LIFETIME_S}

    # --- requests and jobs ----------------------------------------------------------------

    async def line(self, request: Request) -> bytes:
        contents: list[Any] = []
        if request.audio_path is not None:
            up = self.state.uploads[request.audio_sha256]
            contents.append(types.Part.from_uri(file_uri=up["uri"], mime_type=up["mime"]))
        contents.append(request.prompt)  # as Gemini.generate: the audio, then the prompt
        inline = types.InlinedRequest(contents=contents, config=self.backend.generation_config(request),
                                      metadata={"key": request.sample_id})
        self._inline[request.sample_id] = inline
        # The SDK's own conversion of an inline request, so a file line and an inline
        # request are one body.
        rest = batches._InlinedRequest_to_mldev(self._client()._api_client, inline)
        rest = _common.encode_unserializable_types(_common.convert_to_dict(rest))
        return json.dumps({"key": request.sample_id, "request": rest["request"]},
                          ensure_ascii=False, separators=(",", ":")).encode()

    async def upload_input(self, chunk: Chunk) -> str | None:
        if chunk.nbytes <= self.options.inline_max_bytes:
            return None
        try:
            async with asyncio.timeout(max(self.timeout_s, TRANSFER_TIMEOUT_S)):
                f = await self._client().aio.files.upload(
                    file=str(chunk.path), config={"mime_type": "jsonl",
                                                  "display_name": chunk.path.stem})
        except errors.APIError as exc:
            code = exc.code if isinstance(exc.code, int) else None
            raise SubmitError(f"request file upload: gemini {code}: {exc.message}",
                              rejected=code is not None and not retryable_status(code)) from None
        except Exception as exc:
            raise SubmitError(f"request file upload: {type(exc).__name__}: {exc}") from None
        return f.name

    async def create(self, chunk: Chunk, input_ref: str | None, tag: str) -> Created:
        src: Any = input_ref if input_ref else [self._inline[s] for s in chunk.sample_ids]
        try:
            async with asyncio.timeout(self.timeout_s):
                job = await self._client().aio.batches.create(
                    model=self.backend.model, src=src, config={"display_name": tag})
        except errors.APIError as exc:
            code = exc.code if isinstance(exc.code, int) else None
            raise SubmitError(f"gemini {code} {exc.status}: {exc.message}",
                              rejected=code is not None and not retryable_status(code)) from None
        except Exception as exc:  # it may have reached the server: look it up next time
            raise SubmitError(f"{type(exc).__name__}: {exc}", ambiguous=True) from None
        created = job.create_time.timestamp() if job.create_time else time.time()
        return Created(job.name, created + FILE_LIFETIME_S)

    async def find(self, job: Job) -> str | None:
        async with asyncio.timeout(self.timeout_s * 4):
            pager = await self._client().aio.batches.list(config={"page_size": 100})
            async for j in pager:
                if j.display_name == job.tag:
                    return j.name
        return None

    async def status(self, job: Job) -> JobStatus:
        j, entries = await self._get_job(job.job_id)
        state = j.state.name if j.state is not None else "JOB_STATE_UNSPECIFIED"
        error = None
        if j.error is not None:
            error = f"{j.error.code or 'error'}: {j.error.message or ''}".strip()
        return JobStatus(state, _OUTCOME.get(state), error, {}, job.expires_at,
                         raw=(j, entries))

    async def _get_job(self, name: str) -> tuple[Any, list[Any]]:
        """The job as `batches.get` reads it, its inline responses read one by one: the SDK
        reads the whole list at once, so one entry that is not a mapping (or not a response)
        would make the job unreadable, polled forever. An entry it cannot read is in the list
        as why (a string), for `results` to count."""
        api = self._client().aio._api_client  # the SDK's own transport (auth, base URL, retries)
        async with asyncio.timeout(self.timeout_s):
            resp = await api.async_request("get", name, {}, None)
        raw = json.loads(resp.body) if resp.body else {}
        output = ((raw.get("metadata") or {}).get("output") if isinstance(raw, dict) else None)
        entries: list[Any] = []
        if isinstance(output, dict) and "inlinedResponses" in output:
            inline = output.pop("inlinedResponses")
            listed = inline.get("inlinedResponses") if isinstance(inline, dict) else inline
            if listed is not None:
                entries = [_read_entry(e)
                           for e in (listed if isinstance(listed, list) else [listed])]
        j = types.BatchJob._from_response(response=batches._BatchJob_from_mldev(raw), kwargs={})
        return j, entries

    async def results(self, job: Job, status: JobStatus) -> Results:
        """Inline answers (a job submitted inline) read here; a result file by the base's loop."""
        _, entries = status.raw
        if not entries:
            return await super().results(job, status)
        out = Results()
        for item in entries:
            if isinstance(item, str):  # what `_read_entry` could not read, and why
                out.ignore(item)
                continue
            key = (item.metadata or {}).get("key")
            if item.response is not None:
                out.add(key, reply_or_error(to_reply, item.response))
            else:
                out.add(key, _error_text(item.error))
        return out

    def result_files(self, status: JobStatus) -> list[str]:
        dest = status.raw[0].dest
        return [dest.file_name] if dest is not None and dest.file_name else []

    async def download(self, ref: str) -> bytes:
        return await self._client().aio.files.download(file=ref)

    def result_line(self, entry: dict[str, Any]) -> tuple[Any, Reply | str] | None:
        if isinstance(entry.get("response"), dict):
            return entry.get("key"), reply_or_error(lambda r: to_reply(_response(r)), entry["response"])
        return entry.get("key"), _error_text(entry.get("error") or entry.get("status"))

    async def cancel(self, job: Job) -> None:
        async with asyncio.timeout(self.timeout_s):
            await self._client().aio.batches.cancel(name=job.job_id)

    async def cleanup(self, job: Job, status: JobStatus | None) -> None:
        names = [job.input_ref]
        still_used = {c.get("audio_sha256") for j in self.state.jobs if j is not job
                      for c in j.clips.values()}
        for c in job.clips.values():
            sha = c.get("audio_sha256")
            if sha and sha not in still_used and sha in self.state.uploads:
                names.append(self.state.uploads.pop(sha)["name"])
        for name in names:
            if not name:
                continue
            try:
                async with asyncio.timeout(self.timeout_s):
                    await self._client().aio.files.delete(name=name)
            except Exception:  # noqa: BLE001 - uploaded files expire on their own in 48 h
                pass


def _read_entry(e: Any) -> Any:
    """One inline response entry as the SDK reads it (an InlinedResponse), or why it is not
    one (a string)."""
    if not isinstance(e, dict):
        return "not a mapping"
    try:
        return types.InlinedResponse._from_response(
            response=batches._InlinedResponse_from_mldev(e), kwargs={})
    except Exception:  # noqa: BLE001 - a malformed entry costs its clip a fallback
        return "unreadable"


def _response(d: dict[str, Any]):
    """A REST GenerateContentResponse (a result file line) read as the SDK reads one."""
    return types.GenerateContentResponse._from_response(
        response=batches._GenerateContentResponse_from_mldev(d), kwargs={})


def _error_text(err: Any) -> str:
    if not err:
        return "gemini: the result carries neither a response nor an error"
    if isinstance(err, dict):
        return f"gemini {err.get('code', '')} {err.get('message', '')}".strip()
    return f"gemini {getattr(err, 'code', '') or ''} {getattr(err, 'message', '') or ''}".strip()
