"""`download.redirect_hosts` / `paper.redirect_hosts` are host names, checked when params are
read (issue 49): `['.com']` used to follow a redirect to any .com host, and `['*']` was accepted
and matched nothing."""

from __future__ import annotations

import httpx
import pytest

from agl.dataset.prepare import from_params
from agl.dataset.sources import SourceConfig
from agl.errors import AglError
from agl.http.bounds import check_redirect_hosts, redirect_allowed


@pytest.mark.parametrize("host, said", [
    (".com", "starts with a dot"),
    (".example.org", "starts with a dot"),
    ("*", "wildcard"),
    ("*.example.org", "wildcard"),
    ("com", "public suffix"),
    ("co.uk", "public suffix"),
    ("github.io", "public suffix"),
    ("https://cdn.example.org", "not a host name"),
    ("cdn.example.org:8080", "not a host name"),
    ("cdn.example.org/path", "not a host name"),
    ("", "not a host name"),
    (3, "not a host name"),
])
def test_what_is_no_host_name_is_refused_when_params_are_read(host, said):
    for read, field in ((lambda h: from_params({"download": {"redirect_hosts": h}}), "download.redirect_hosts"),
                        (lambda h: SourceConfig.from_params({"paper": {"redirect_hosts": h}}),
                         "paper.redirect_hosts")):
        with pytest.raises(AglError) as err:
            read([host])
        line = str(err.value)
        assert field in line and said in line and "\n" not in line, line


def test_a_listed_host_covers_itself_and_its_subdomains_only():
    hosts = check_redirect_hosts(["Cdn.Example.org", "localhost", "127.0.0.1", "bücher.example"], "f")
    assert hosts == ("cdn.example.org", "localhost", "127.0.0.1", "xn--bcher-kva.example")
    src = httpx.URL("https://archive.org/download/x")
    for target, ok in (("https://cdn.example.org/a", True), ("https://eu.cdn.example.org/a", True),
                       ("https://evilcdn.example.org/a", False), ("https://example.org/a", False),
                       ("https://ia800.us.archive.org/a", True), ("https://evil.com/a", False),
                       ("http://cdn.example.org/a", False)):
        assert redirect_allowed(src, httpx.URL(target), hosts) is ok, target
