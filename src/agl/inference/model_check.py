"""`agl models --check`: which roster model ids each provider still serves.

Asks each provider whose key is set for its model list (OpenAI: OPENAI_API_KEY; Gemini:
GEMINI_API_KEY; the paper protocol's gateway: AGL_GATEWAY_URL + AGL_GATEWAY_KEY) and sorts
every roster id it would serve into available (listed), renamed (not listed, but a listed id
is the same name with a suffix added or dropped: a dated snapshot, a `-001`) or gone (neither;
the roster's successor is named). Local servers (vLLM) are not asked: they serve what they
were started with. Without a key, or without the network, it says what it needs in one line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agl.core.secrets import known_secrets, scrub
from agl.errors import AglError
from agl.inference.roster import RosterEntry, load_roster
from agl.predictions.served import bare

TIMEOUT_S = 20.0


def _openai_ids(key: str, base_url: str | None) -> list[str]:
    from openai import OpenAI  # the SDK only this check and the backends need

    client = OpenAI(api_key=key, base_url=base_url, max_retries=0, timeout=TIMEOUT_S)
    return [m.id for m in client.models.list()]


def _gemini_ids(key: str, base_url: str | None) -> list[str]:
    from google import genai  # (as above)
    from google.genai import types

    opts = types.HttpOptions(api_version="v1beta", timeout=int(TIMEOUT_S * 1000),
                             **({"base_url": base_url} if base_url else {}))
    client = genai.Client(api_key=key, http_options=opts)
    return [str(m.name) for m in client.models.list()]


def providers(environ: Mapping[str, str]) -> dict[str, tuple[Callable[[], list[str]], Any]]:
    """The providers a key is set for: name -> (list the ids, which roster entries it serves)."""
    out: dict[str, tuple[Callable[[], list[str]], Any]] = {}
    if environ.get("OPENAI_API_KEY"):
        out["openai"] = (lambda: _openai_ids(environ["OPENAI_API_KEY"],
                                             environ.get("OPENAI_BASE_URL")),
                         lambda r: r.spec.backend == "openai")
    if environ.get("GEMINI_API_KEY"):
        out["gemini"] = (lambda: _gemini_ids(environ["GEMINI_API_KEY"],
                                             environ.get("GEMINI_BASE_URL")),
                         lambda r: r.spec.backend == "gemini")
    if environ.get("AGL_GATEWAY_URL") and environ.get("AGL_GATEWAY_KEY"):
        out["gateway"] = (lambda: _openai_ids(environ["AGL_GATEWAY_KEY"],
                                              environ["AGL_GATEWAY_URL"]),
                          lambda r: r.spec.settings.get("base_url_env") == "AGL_GATEWAY_URL")
    return out


def classify(r: RosterEntry, listed: list[str]) -> str:
    """available / renamed (to which listed ids) / gone (and the roster's successor)."""
    ids = {bare(x): x for x in listed}
    want = bare(r.spec.model)
    if want in ids:
        return "available"
    near = sorted(x for b, x in ids.items()
                  if b.startswith(want + "-") or want.startswith(b + "-"))
    if near:
        return "renamed: listed as " + ", ".join(near[:3])
    line = "gone"
    if r.retired:
        line += f" (roster: retired {r.retired})"
    if r.successor:
        line += f"; successor {r.successor}" + (" (listed)" if bare(r.successor) in ids
                                                else " (not listed either)")
    return line


def check_roster(environ: Mapping[str, str]) -> list[str]:
    """One line per roster entry (both protocols) a provider with a key serves."""
    asked = providers(environ)
    if not asked:
        raise AglError("agl models --check needs the network and a key: set OPENAI_API_KEY, "
                       "GEMINI_API_KEY, or AGL_GATEWAY_URL and AGL_GATEWAY_KEY")
    lines = []
    for name, (list_ids, serves) in asked.items():
        try:
            listed = list_ids()
        except Exception as exc:  # noqa: BLE001 - any SDK or network failure is one line
            why = scrub(f"{type(exc).__name__}: {str(exc)[:200]}", known_secrets())
            raise AglError(f"agl models --check needs the network: {name}'s model list "
                           f"failed ({why})") from None
        for protocol in ("controlled", "paper"):
            for r in load_roster(protocol=protocol):
                if serves(r):
                    lines.append(f"{name:<8} {protocol:<11} {r.spec.name:<26} "
                                 f"{r.spec.model:<36} {classify(r, listed)}")
    return lines
