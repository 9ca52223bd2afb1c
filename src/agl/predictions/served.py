"""The served-model ledger: what the provider says answered each clip, beside what was asked.

Providers name the model that answered (OpenAI `response.model` and `system_fingerprint`,
Gemini `model_version`); backends keep them in a reply's `served_model` /
`system_fingerprint`. Those facts never enter the cache key or the run fingerprint (a
provider re-routes an alias, rotates a fingerprint: the request is the same). Where they live:

* per clip, in the run's `run_summary.timings.json` (`clips`, ignored by DVC), with
  `served_clips` and `system_fingerprints` (a fingerprint rotates without the model changing:
  volatile, never tracked);
* the run-level summary a reader must see (`TRACKED`): `served_models` (id -> share of the
  clips that named one) and `served_flags` (a served id that is not the asked one, or more
  than one served id in a run) in the tracked `run_summary.json`, where the leaderboard and
  the report read them. Only a run with served ids has those keys (an offline backend writes
  none, so its tracked files are as before).

Why the summary may be tracked: a cached reply keeps the ids it was answered with, so a replay
(or `dvc repro -f`, which answers deterministic clips from the cache again) reproduces the same
`run_summary.json`, and `dvc.lock` is unchanged. A fresh run that meets another served model
is a different experiment, and rightly changes the tracked output.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

# A dated snapshot of an alias (`gpt-4o-audio-preview-2024-12-17` for `gpt-4o-audio-preview`,
# `...-001`) is the asked model; anything else after the id (`-preview-05-20`) is not.
_SNAPSHOT = re.compile(r"^[0-9][0-9-]*$")
# The ledger's keys that go to the tracked run_summary.json (the rest stay in its timings).
TRACKED = ("served_models", "served_flags")


def bare(model_id: str) -> str:
    """An id without `models/` (Gemini) or a gateway's `provider/` prefix, lower-cased."""
    return model_id.strip().lower().rsplit("/", 1)[-1]


def whole_id(model_id: str) -> tuple[str, str]:
    """(provider, model) of an id, lower-cased: Gemini's `models/` resource prefix is no
    provider and is dropped; a gateway's `provider/` (or `org/` of a Hugging Face id) is kept,
    "" where the id names none."""
    text = model_id.strip().lower().removeprefix("models/")
    provider, _, model = text.rpartition("/")
    return provider, model


def same_model(asked: str, served: str) -> bool:
    """Whether `served` names the `asked` model: the same provider (or none on either side)
    and the same model, itself or a dated snapshot of it. Compared whole: `evilcorp/x` served
    for `google/x` is another provider's model of the same name, and flagged (comparing the
    part after the last `/` alone used to let it pass)."""
    (pa, a), (ps, s) = whole_id(asked), whole_id(served)
    if pa != ps:
        return False
    return s == a or (s.startswith(a + "-") and bool(_SNAPSHOT.match(s[len(a) + 1:])))


def ledger(clips: Mapping[str, Mapping[str, Any]], keys: list[str], asked: str) -> dict[str, Any]:
    """The run's ledger over `keys` (its recorded clips) from each clip's volatile meta."""
    served = Counter(str(clips[k]["served_model"]) for k in keys
                     if (clips.get(k) or {}).get("served_model"))
    prints = Counter(str(clips[k]["system_fingerprint"]) for k in keys
                     if (clips.get(k) or {}).get("system_fingerprint"))
    n = sum(served.values())
    if not n:
        return {}
    out: dict[str, Any] = {
        "served_clips": n,
        "served_models": {m: round(c / n, 4) for m, c in sorted(served.items())},
    }
    if prints:
        total = sum(prints.values())
        out["system_fingerprints"] = {f: round(c / total, 4) for f, c in sorted(prints.items())}
    flags = [f"served '{m}' for {c} of {n} clip(s), not the asked '{asked}'"
             for m, c in sorted(served.items()) if not same_model(asked, m)]
    if len(served) > 1:
        flags.append("the served model changed during the run: "
                     + ", ".join(f"{m} ({c})" for m, c in sorted(served.items())))
    if flags:
        out["served_flags"] = flags
    return out


def split(ledger_: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the keys for the tracked run_summary.json, those for its timings file) of a ledger."""
    return ({k: v for k, v in ledger_.items() if k in TRACKED},
            {k: v for k, v in ledger_.items() if k not in TRACKED})


def flag_line(run: str, summary: Mapping[str, Any]) -> str | None:
    """One line for a run whose ledger holds flags (None when it holds none)."""
    flags = summary.get("served_flags") or []
    return f"{run}: " + "; ".join(flags) if flags else None
