"""Every network read is bounded (issue 24): sources by URL, the crawler, `agl shared`, and the
transport under them, against hostile servers on 127.0.0.1.

Each class of hostile reply (an endless body, a slow body, slow headers, a gzip bomb, an HTML
error page with status 200, a redirect to another host) is refused in bounded time, with
bounded memory (the command runs in a fresh interpreter and its peak RSS growth is measured),
with one line, and nothing is cached or left on disk. Caps are small so each run takes
seconds; `pytest -s` prints the measured figures.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from pathlib import Path

import pytest
from factories import manifest as make_manifest
from factories import prediction
from hostile_server import (
    HostileServer,
    body,
    endless,
    files_under,
    gzip_bomb,
    gzipped,
    html_page,
    json_body,
    redirect,
    run_measured,
    slow_body,
    slow_headers,
)

from agl.dataset.manifest import write_manifest
from agl.dataset.sources import SourceConfig, resolve_source
from agl.errors import AglError
from agl.http import client as http
from agl.predictions.records import write_predictions

DEADLINE_S = 1.5
CAP = 1_000_000
# The modules `agl evaluate` imports, loaded before the memory baseline.
EVALUATE_MODULES = ("numpy", "pandas", "httpx", "agl.http.client", "agl.http.transport",
                    "agl.dataset.paper", "agl.dataset.remote_file", "agl.scoring.evaluate",
                    "agl.predictions.importer", "agl.commands.evaluate",
                    "agl.commands._evaluate_impl")


@pytest.fixture
def files(tmp_path):
    """A manifest and a predictions file for it (the good content a server may serve)."""
    manifest = tmp_path / "manifest.csv"
    write_manifest(make_manifest([{"key": "k0"}, {"key": "k1", "city": "Lyon"}]), manifest)
    preds = tmp_path / "preds.jsonl"
    write_predictions(preds, [prediction("k0", 48.85, 2.35, "Paris", "France", "Europe"),
                              prediction("k1", 45.76, 4.83, "Lyon", "France", "Europe")])
    return manifest, preds


def evaluate(url: str, manifest: Path, cache: Path, cwd: Path):
    return run_measured(["evaluate", url, "--manifest", str(manifest), "--cache-dir", str(cache),
                         "--bootstrap", "0", "--deadline-s", str(DEADLINE_S),
                         "--max-bytes", str(CAP)],
                        cwd=cwd, preload=EVALUATE_MODULES)


HOSTILE = {
    "endless body": (endless(), "sent more than 1,000,000 bytes"),
    "slow body": (slow_body(0.3), f"did not finish within {DEADLINE_S:g} s (paper.deadline_s)"),
    "slow headers": (slow_headers(0.3), f"did not finish within {DEADLINE_S:g} s"),
    "gzip bomb": (gzipped(gzip_bomb()), "sent more than 1,000,000 bytes (after decoding)"),
    "HTML page with 200": (html_page(), "an HTML page"),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_evaluate_url_refuses_a_hostile_reply_bounded_in_one_line(kind, files, tmp_path):
    behaviour, said = HOSTILE[kind]
    manifest, _ = files
    cache = tmp_path / "cache"
    with HostileServer({"/preds.jsonl": behaviour}) as server:
        m = evaluate(f"{server.url}/preds.jsonl", manifest, cache, tmp_path)
    assert m.rc == 2, m.stderr
    assert len(m.lines()) == 1 and m.lines()[0].startswith("agl evaluate: error: "), m.stderr
    assert said in m.stderr and "Traceback" not in m.stderr
    assert m.seconds < DEADLINE_S + 3  # the deadline, not the server, ends it
    assert m.rss_growth_mb < 40  # an unbounded read of the bomb holds 1 GiB
    assert files_under(cache) == []  # nothing cached, no .part left


def test_an_error_page_is_not_cached_and_the_next_run_reads_the_recovered_file(files, tmp_path):
    manifest, preds = files
    cache = tmp_path / "cache"
    with HostileServer({"/p.jsonl": [html_page(), body(preds.read_bytes(), "text/plain")]}) as s:
        url = f"{s.url}/p.jsonl"
        with pytest.raises(AglError, match="HTML page"):
            resolve_source(url, cache_dir=cache, config=SourceConfig())
        assert files_under(cache) == []
        got = resolve_source(url, cache_dir=cache, config=SourceConfig())  # recovered
        assert got.read_bytes() == preds.read_bytes()
        # An error page an older agl cached is fetched again, not read back for ever.
        got.write_bytes(b"<!DOCTYPE html><html>502</html>")
        assert resolve_source(url, cache_dir=cache, config=SourceConfig()).read_bytes() == \
            preds.read_bytes()
        assert s.log["/p.jsonl"] == 3


@pytest.mark.parametrize("name,payload,said", [
    ("p.json", b"{not json", "not valid JSON"),
    ("m.csv", b"\xff\xfe\x00garbage", "not UTF-8"),
])
def test_a_reply_that_does_not_parse_as_its_kind_is_not_cached(tmp_path, name, payload, said):
    with HostileServer({f"/{name}": body(payload, "text/plain")}) as s:
        with pytest.raises(AglError, match=said):
            resolve_source(f"{s.url}/{name}", cache_dir=tmp_path / "c", config=SourceConfig())
    assert files_under(tmp_path / "c") == []


def test_a_redirect_to_another_host_is_refused_unless_listed(files, tmp_path):
    manifest, preds = files
    cache = tmp_path / "cache"
    server = HostileServer({"/p.jsonl": body(preds.read_bytes(), "text/plain")})
    server.routes["/away"] = redirect(f"http://localhost:{server.port}/p.jsonl")
    server.routes["/here"] = redirect("/p.jsonl")
    with server:
        m = evaluate(f"{server.url}/away", manifest, cache, tmp_path)
        assert m.rc == 2 and len(m.lines()) == 1, m.stderr
        assert "another host (127.0.0.1 -> localhost)" in m.stderr
        assert "paper.redirect_hosts" in m.stderr and files_under(cache) == []
        assert server.log["/p.jsonl"] == 0  # not followed at all
        # The same host is followed; another one once params.yaml lists it.
        assert resolve_source(f"{server.url}/here", cache_dir=cache,
                              config=SourceConfig()).read_bytes() == preds.read_bytes()
        listed = SourceConfig.from_params({"paper": {"redirect_hosts": ["localhost"]}})
        assert resolve_source(f"{server.url}/away", cache_dir=cache,
                              config=listed).read_bytes() == preds.read_bytes()


def test_a_local_file_url_is_capped_too(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b"0," * 600_000 + b"0]")
    config = SourceConfig.from_params({"paper": {"max_bytes": 1_000_000}})
    with pytest.raises(AglError, match="more than 1,000,000 bytes"):
        resolve_source(big.as_uri(), cache_dir=tmp_path / "c", config=config)
    assert files_under(tmp_path / "c") == []


def test_paper_bounds_in_params_are_checked():
    with pytest.raises(AglError, match="paper.deadline_s: 0 is not a positive finite number"):
        SourceConfig.from_params({"paper": {"deadline_s": 0}})
    with pytest.raises(AglError, match="paper.redirect_hosts"):
        SourceConfig.from_params({"paper": {"redirect_hosts": "localhost"}})
    limits = SourceConfig.from_params({"paper": {"max_bytes": 5, "deadline_s": 7}}).limits()
    assert (limits.max_bytes, limits.deadline_s, limits.name("max_bytes")) == \
        (5, 7, "paper.max_bytes")


CRAWL_MODULES = ("httpx", "pandas", "agl.dataset.crawl", "agl.dataset.fetch", "agl.http.client",
                 "agl.http.transport", "agl.commands.crawl")


def test_crawl_refuses_a_bombing_search_api_bounded(tmp_path):
    with HostileServer({"/services/search/v1/scrape": gzipped(gzip_bomb(), "application/json")
                        }) as s:
        m = run_measured(["crawl", "--archive-url", s.url, "--out", str(tmp_path / "m.csv"),
                          "--retries", "0", "--deadline-s", str(DEADLINE_S),
                          "--max-document-bytes", "100000"], cwd=tmp_path,
                         preload=CRAWL_MODULES)
    assert m.rc == 2 and len(m.lines()) == 1, m.stderr
    assert "more than 100,000 bytes (after decoding)" in m.stderr
    assert "--max-document-bytes" in m.stderr and m.rss_growth_mb < 40
    assert m.seconds < DEADLINE_S + 3 and not (tmp_path / "m.csv").exists()


def test_crawl_stops_slow_headers_at_the_deadline(tmp_path):
    with HostileServer({"/services/search/v1/scrape": slow_headers(0.3)}) as s:
        m = run_measured(["crawl", "--archive-url", s.url, "--out", str(tmp_path / "m.csv"),
                          "--retries", "0", "--deadline-s", str(DEADLINE_S)], cwd=tmp_path,
                         preload=CRAWL_MODULES)
    assert m.rc == 2 and len(m.lines()) == 1 and "--deadline-s" in m.stderr, m.stderr
    assert m.seconds < DEADLINE_S + 3 and m.rss_growth_mb < 40


def test_shared_writes_nothing_from_error_pages_or_bombs(tmp_path):
    from agl.dataset.fetch import Policy
    from agl.dataset.shared_data import FILES, build_shared

    routes = {f"/a/{f.path}": html_page() for f in FILES if f.source == "agl1k"}
    routes.update({f"/d/{f.path}": gzipped(gzip_bomb(), "audio/mpeg")
                   for f in FILES if f.source == "archive"})
    routes["/onto.json"] = endless()
    policy = Policy(progress=False, retries=0, deadline_s=DEADLINE_S, max_document_bytes=CAP)
    with HostileServer(routes) as s, pytest.raises(AglError) as err:
        build_shared(tmp_path / "shared", agl1k_base=f"{s.url}/a", archive_base=f"{s.url}/d",
                     ontology_url=f"{s.url}/onto.json", policy=policy)
    assert "6 of 7 file(s) could not be had" in str(err.value)
    assert "\n" not in str(err.value) and "HTML page" in str(err.value)
    assert "more than 1,000,000 bytes (after decoding)" in str(err.value)
    # Only the package's own file is written; no part file is left behind.
    assert [p.name for p in files_under(tmp_path / "shared")] == ["paper_leaderboard.csv"]


# --------------------------------------------------------------------------- the transport itself
FAMILIES = ["httpx"] + (["httpx2"] if importlib.util.find_spec("httpx2") else [])


@pytest.mark.parametrize("flavour", FAMILIES)
def test_the_deadline_reaches_the_socket_in_both_httpx_families(flavour):
    """Headers one byte at a time never trip a per-read timeout; the deadline cuts them off.
    Also the canary for httpx internals: the pool's network backend must be wrappable."""
    from agl.http.transport import family

    limits = http.Limits(timeout_s=5, deadline_s=1.0, max_bytes=CAP)
    hx = family(flavour).hx

    async def get(url):
        async with hx.AsyncClient(**http.async_client_args(limits, flavour=flavour)) as c:
            return await c.get(url)

    with HostileServer({"/h": slow_headers(0.2), "/ok": json_body({"a": 1})}) as s:
        # The message is the deadline's own (a per-read timeout would never fire: a byte comes
        # every 0.2 s); no wall-clock bound, which a loaded machine would stretch.
        with pytest.raises(http.Refused, match="did not finish within 1 s") as err:
            asyncio.run(get(f"{s.url}/h"))
        assert err.value.retryable
        assert json.loads(asyncio.run(get(f"{s.url}/ok")).content) == {"a": 1}


def test_decoding_is_capped_and_correct():
    import gzip
    import zlib

    text = b"hello world " * 20000
    with HostileServer({"/gz": gzipped(gzip.compress(text) + gzip.compress(text)),
                        "/deflate": body(zlib.compress(text), headers={"Content-Encoding": "deflate"}),
                        "/raw": body(zlib.compress(text)[2:-4], headers={"Content-Encoding": "deflate"}),
                        "/br": body(b"x", headers={"Content-Encoding": "br"})}) as s:
        with http.client(http.Limits(max_bytes=CAP)) as c:
            assert c.get(f"{s.url}/gz").content == text * 2  # two gzip members
            assert c.get(f"{s.url}/deflate").content == text
            assert c.get(f"{s.url}/raw").content == text
            with pytest.raises(http.Refused, match="Content-Encoding 'br'"):
                c.get(f"{s.url}/br")
        with http.client(http.Limits(max_bytes=len(text) - 1, param="download")) as c:
            with pytest.raises(http.Refused, match="download.max_bytes"):
                c.get(f"{s.url}/deflate")


def test_redirect_rules():
    import httpx

    ok = http.redirect_allowed
    src = httpx.URL("https://archive.org/download/x/y.mp3")
    assert ok(src, httpx.URL("https://ia800.us.archive.org/1/items/x/y.mp3"), ())
    assert not ok(src, httpx.URL("http://archive.org/download/x/y.mp3"), ())  # no downgrade
    assert not ok(src, httpx.URL("https://evil.example/x"), ())
    assert not ok(src, httpx.URL("https://notarchive.org/x"), ())
    assert ok(src, httpx.URL("https://cdn.example.net/x"), ("example.net",))  # a host covers its subdomains
    assert ok(src, httpx.URL("https://example.net/x"), ("example.net",))
    assert not ok(src, httpx.URL("file:///etc/passwd"), ())


@pytest.mark.parametrize("behaviour", [slow_body(0.5), slow_headers(0.5)], ids=["body", "headers"])
def test_a_stalled_transfer_ends_before_its_deadline_in_one_line(behaviour, tmp_path):
    """A byte every half second (2 bytes/s) under a floor of 64 bytes/s over 2 s: cut at the
    window's end, long before the 300 s deadline, and nothing is cached."""
    cfg = SourceConfig.from_params({"paper": {"min_rate_bps": 64, "stall_window_s": 2}})
    assert cfg.deadline_s == 300
    with HostileServer({"/p.jsonl": behaviour}) as server:
        with pytest.raises(AglError) as err:
            resolve_source(f"{server.url}/p.jsonl", cache_dir=tmp_path / "cache", config=cfg)
    msg = str(err.value)
    assert "\n" not in msg and "the transfer stalled" in msg, msg
    assert "under 64 bytes/s (paper.min_rate_bps, paper.stall_window_s)" in msg, msg
    assert files_under(tmp_path / "cache") == []


def test_a_slow_but_steady_transfer_is_not_a_stall(tmp_path):
    """Above the floor: 20 bytes a second for 3 s against a floor of 4 bytes/s over 1 s."""
    payload = b'{"k": 1}\n' * 6
    def steady(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        for i in range(0, len(payload), 3):
            h.wfile.write(payload[i:i + 3])
            h.wfile.flush()
            time.sleep(0.15)
    cfg = SourceConfig.from_params({"paper": {"min_rate_bps": 4, "stall_window_s": 1}})
    with HostileServer({"/p.jsonl": steady}) as server:
        got = resolve_source(f"{server.url}/p.jsonl", cache_dir=tmp_path / "cache", config=cfg)
    assert got.read_bytes() == payload


@pytest.mark.parametrize("value", [0, -1, "fast", True, float("inf")])
def test_a_bad_stall_floor_is_one_line(value):
    with pytest.raises(AglError) as err:
        SourceConfig.from_params({"paper": {"min_rate_bps": value}})
    assert "paper.min_rate_bps" in str(err.value) and "\n" not in str(err.value)
