"""`langprior`: what the language alone tells. Whisper names the language; a census places it.

Per clip: the speech stage's listening (`agl.speech.listen`: Silero VAD, then Whisper's
language ID on the speech only) gives the top languages with their probabilities; the
guess is the country with the most speakers of them (`agl.speech.census`):

    P(country | clip) = sum over the top languages l of P(l | clip) * P(country | l),
    P(country | l) proportional to CLDR's share of l in the country x its population,

with P(l | clip) renormalised over the top languages that have census figures. The answer is
the most likely country, at its documented point (`point`: population-weighted centroid of its
cities snapped to the nearest city, or its largest city), with the country's continent. No
audio model of geography is involved: this is the floor any model that "uses speech" should
clear, and the report's "beyond the language" compares every run with it.

Abstentions are structured refusals (scored 10,000 km under `paper`, the worst case under
`strict`), never a made-up coordinate: too little speech (`no_speech`), a language below
`min_language_probability` (`uncertain`), or languages CLDR lists nowhere. The reply is JSON
like a model's (reasoning, city, country, continent, latitude, longitude); `reasoning` names
the languages and the top three countries with their probabilities.

Settings (params.yaml `models: langprior: settings:`): the listening knobs of params.yaml
`speech:` (model, sha256, device, compute_type, cpu_isa, threads, cache_dir, heard_cache, vad_threshold,
vad_min_speech_ms, vad_min_silence_ms, vad_pad_ms, min_speech_s, window_s, max_windows,
confident, min_language_probability, top_languages, max_listen_s; the same defaults) and `point`
(centroid | largest_city).

`answer` reads a clip's hearing it may not have made itself (the heard cache is shared with the
speech stage, and a file on disk can hold anything): a record that no listening writes (an
unknown status, a language code that is not a string, a probability that is not a finite
number in [0, 1], speech seconds missing or not finite) is a failed clip with the reason,
never an exception and never a guess.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from typing import Any, ClassVar

from agl.backends.base import Backend
from agl.contracts.calls import Reply, ReplyStatus, Request
from agl.errors import AglError
from agl.speech.census import POINTS, census_identity, countries, country_probabilities, language_name
from agl.speech.heard import CachedListener
from agl.speech.languages import bad_language
from agl.speech.listen import STATUSES, SpeechConfig
from agl.speech.tables import PROB_DECIMALS  # the speech stage's precision: digits the kernels agree on

_LISTENING = {"model", "sha256", "device", "compute_type", "cpu_isa", "threads", "cache_dir", "heard_cache",
              "vad_threshold", "vad_min_speech_ms", "vad_min_silence_ms", "vad_pad_ms", "min_speech_s", "window_s",
              "max_windows", "confident", "min_language_probability", "top_languages", "max_listen_s"}


def malformed(heard) -> str | None:
    """Why a clip's hearing is not one the listening writes, or None when it is one."""
    status = getattr(heard, "status", None)
    if not isinstance(status, str) or status not in STATUSES:
        return f"status {status!r} is not one of {', '.join(STATUSES)}"
    if status == "off":
        return "the clip was not listened to (speech off)"
    languages = getattr(heard, "languages", None)
    if not isinstance(languages, list | tuple):
        return f"languages {languages!r} is not a list of (code, probability)"
    for i, pair in enumerate(languages):
        why = (bad_language(*pair) if isinstance(pair, list | tuple) and len(pair) == 2
               else f"{pair!r} is not a (code, probability) pair")
        if why:
            return f"languages[{i}]: {why}"
    seconds = getattr(heard, "speech_seconds", None)
    needed = status in ("ok", "uncertain")
    if (seconds is not None or needed) and (
            isinstance(seconds, bool) or not isinstance(seconds, int | float)
            or not (math.isfinite(seconds) and seconds >= 0)):
        return f"speech_seconds {seconds!r} is not a number of seconds"
    if needed and not languages:
        return f"status {status} without a language"
    return None


def answer(heard, point: str = "centroid", model_name: str = "") -> Reply:
    """The reply for one clip's `ClipSpeech` (pure: no audio, no model). Never raises on a
    hearing it did not make: a malformed one is a failed clip naming what is wrong."""
    why = malformed(heard)
    if why is not None:
        return Reply(ReplyStatus.FAILED, error=f"the clip's hearing is malformed: {why}",
                     extra={"speech_status": str(getattr(heard, "status", None))})
    extra: dict[str, Any] = {"speech_status": heard.status, "speech_seconds": heard.speech_seconds,
                             "languages": [[c, round(p, PROB_DECIMALS)] for c, p in heard.languages]}
    if getattr(heard, "cut", False) is True and isinstance(heard.seconds, float):
        extra["listened_s"] = heard.seconds  # the clip goes on past speech.max_listen_s: this much was heard
    if heard.status in ("missing", "unreadable"):
        return Reply(ReplyStatus.FAILED, error=f"could not listen: {heard.error}", extra=extra)
    if heard.status == "no_speech":
        return Reply(ReplyStatus.REFUSED, extra=extra, text=(
            f"abstained: {heard.speech_seconds or 0.0:.1f} s of speech heard (voice activity), too little to "
            "identify a language; the spoken language is the only cue this baseline reads"))
    heard_txt = ", ".join(f"{language_name(c)} ({c}) {p:.2f}" for c, p in heard.languages[:3])
    if heard.status == "uncertain":
        return Reply(ReplyStatus.REFUSED, extra=extra, text=(
            f"abstained: {heard.speech_seconds:.1f} s of speech, but no language is likely enough "
            f"(Whisper: {heard_txt})"))
    probs, used = country_probabilities(heard.languages)
    if not probs:
        return Reply(ReplyStatus.REFUSED, extra=extra, text=(
            f"abstained: Whisper hears {heard_txt}, and CLDR lists no country where these are spoken"))
    table = countries(point)
    best = table[probs[0][0]]
    top3 = "; ".join(f"{table[k].name} {p:.2f}" for k, p in probs[:3])
    where = ("its largest city" if point == "largest_city"
             else "the city nearest its population-weighted centroid")
    reasoning = (
        f"{heard.speech_seconds:.1f} s of speech; Whisper ({model_name}) identifies {heard_txt}. "
        f"Where these languages are spoken (CLDR share x population, mixed over "
        f"{', '.join(language_name(c) for c in used)} by their probabilities): {top3}. "
        f"Answer: {best.name}, at {best.city} ({where})."
    )
    extra.update({"top_countries": [[table[k].name, round(p, PROB_DECIMALS)] for k, p in probs[:3]],
                  "languages_used": used})
    text = json.dumps({"reasoning": reasoning, "city": best.city, "country": best.name,
                       "continent": best.continent, "latitude": round(best.latitude, 6),
                       "longitude": round(best.longitude, 6)})
    return Reply(ReplyStatus.OK, text=text, input_tokens=0, output_tokens=0, extra=extra)


class LanguagePrior(Backend):
    name = "langprior"  # its entry in the index (agl.backends)
    # Replies depend on the model files and census data behind `model`, which the reply cache
    # key does not see; finished clips are never requested twice anyway (predictions resume).
    deterministic = False
    needs_audio = True
    loads_model = True  # a speech / bird model in this process: one Ray actor per copy
    # The listening knobs are checked by SpeechConfig (agl.speech), by its field types.
    settings_rules: ClassVar[dict[str, str | None]] = {k: None for k in (*sorted(_LISTENING), "point")}

    default_model = SpeechConfig.model  # the speech stage's Whisper: one default, one heard cache

    def __init__(self, model: str = "", **settings: Any):
        super().__init__(model, **settings)
        self.point = str(settings.get("point", "centroid"))
        if self.point not in POINTS:
            raise AglError(f"langprior: point '{self.point}' is not one of {', '.join(POINTS)}")
        listening = {k: v for k, v in settings.items() if k in _LISTENING and k != "model"}
        self.cfg = SpeechConfig.from_params({**listening, "model": self.model}, source="langprior settings")
        self._listener = None
        self._lock = threading.Lock()  # one CTranslate2 model: one clip at a time

    def listener(self):
        if self._listener is None:
            self._listener = CachedListener(self.cfg)
        return self._listener

    def answer_path(self, key: str, path) -> Reply:
        # The census too under the lock: its first use imports babel, and two threads
        # importing it at once fail half-way (a clip answered from the heard cache is quick
        # enough for that race).
        with self._lock:
            t0 = time.perf_counter()
            heard = self.listener().listen(key, path)
            listen_s = time.perf_counter() - t0
            reply = answer(heard, self.point, self.model)
            reply.extra.update({"listen_s": round(listen_s, 3), "census": census_identity(),
                                "model_sha256": self.listener().identity.files.get("model.bin")})
        return reply

    async def generate(self, request: Request) -> Reply:
        if request.audio_path is None:
            return Reply(ReplyStatus.FAILED, error="langprior listens to the audio; none given")
        return await asyncio.to_thread(self.answer_path, request.sample_id, request.audio_path)
