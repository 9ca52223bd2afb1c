"""Build a candidate manifest from the Internet Archive's `aporee` collection (the AGL1K pool).

1. List the collection's items with the Archive's scrape API (`/services/search/v1/scrape`,
   cursor-paged; the documented way to list a large result set) or, where a mirror offers only
   that, the advanced search API (`/advancedsearch.php`, page-numbered).
2. Read each item's metadata (`/metadata/<identifier>`): title, description, coordinates,
   altitude, and the MP3 file with its duration (the original upload where there is one).
3. Turn coordinates into city / country / continent offline: `reverse_geocoder` (GeoNames
   cities over 1,000 people, nearest neighbour; the gazetteer AGL1K's own city names match)
   and `country_converter` (short country names, seven-continent classification).
4. Write the AGL1K schema (agl.dataset.manifest.COLUMNS). The eight sound-category columns are left
   empty: the Archive does not publish them, and they come from listening (the `tag` stage),
   never from a guess here.

Items without usable coordinates, without an MP3, or with a file name that is not a plain
name are not guessed at: each is listed with its reason in the crawl report.
"""

from __future__ import annotations

import math
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from agl.core import diskwrite
from agl.core.jsonutil import dumps
from agl.core.paths import is_plain_name
from agl.dataset.fetch import get_json, make_client
from agl.dataset.manifest import CATEGORY_COLUMNS, COLUMNS
from agl.errors import AglError

if TYPE_CHECKING:
    import httpx
    import pandas as pd

    from agl.dataset.fetch import Policy

ARCHIVE_URL = "https://archive.org"
# Field names an item may carry its position under, most specific first.
_LAT_KEYS = ("latitude", "lat", "geo_lat")
_LON_KEYS = ("longitude", "lon", "lng", "long", "geo_lon", "geo_long")
_PAIR = re.compile(r"(-?\d{1,3}(?:\.\d+)?)\s*[,;/ ]\s*(-?\d{1,3}(?:\.\d+)?)")


@dataclass(frozen=True)
class CrawlConfig:
    """What `agl crawl` lists and keeps from the Internet Archive's Aporee collection (`crawl:`
    options)."""
    archive_url: str = ARCHIVE_URL  # scrape, advancedsearch and metadata live under it
    collection: str = "aporee"
    search_api: str = "scrape"  # scrape | advancedsearch
    page_size: int = 1000  # items per search page (scrape: at least 100)
    limit: int | None = None  # stop after this many items (None: the whole collection)
    jobs: int = 4  # metadata requests in flight


@dataclass(frozen=True)
class CrawlReport:
    listed: int
    kept: int
    skipped: dict[str, str] = field(default_factory=dict)  # identifier -> reason

    def line(self) -> str:
        return f"{self.listed} item(s) listed, {self.kept} kept, {len(self.skipped)} skipped"


@dataclass(frozen=True)
class _Item:
    key: str
    title: str
    description: str
    latitude: float
    longitude: float
    altitude: float | None
    mp3name: str
    seconds: float


def crawl(
    config: CrawlConfig, policy: Policy, client: httpx.Client | None = None
) -> tuple[pd.DataFrame, CrawlReport]:
    """The collection as a manifest frame (AGL1K columns) and a report of what was skipped."""

    own = client is None
    client = client or make_client(policy)
    try:
        identifiers = list_items(config, policy, client)
        items, skipped = _read_items(identifiers, config, policy, client)
    finally:
        if own:
            client.close()
    frame = to_frame(items)
    return frame, CrawlReport(listed=len(identifiers), kept=len(items), skipped=skipped)


def list_items(config: CrawlConfig, policy: Policy, client: httpx.Client) -> list[str]:
    """Identifiers in the collection, in the order the search API returns them."""
    if config.search_api == "scrape":
        found = _scrape(config, policy, client)
    elif config.search_api == "advancedsearch":
        found = _advanced(config, policy, client)
    else:
        raise AglError(f"crawl: search_api {config.search_api!r} is not scrape or advancedsearch")
    seen: dict[str, None] = {}
    for ident in found:
        seen.setdefault(ident, None)
        if config.limit is not None and len(seen) >= config.limit:
            break
    return list(seen)


def _scrape(config: CrawlConfig, policy: Policy, client: httpx.Client):
    cursor = None
    while True:
        query = {"q": f"collection:{config.collection}", "fields": "identifier",
                 "count": max(100, config.page_size)}  # fmt: skip
        if cursor:
            query["cursor"] = cursor
        doc = _json(client, f"{config.archive_url.rstrip('/')}/services/search/v1/scrape?"
                    + urlencode(query), policy)  # fmt: skip
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise AglError("crawl: the scrape API answered without an 'items' list")
        yield from (i["identifier"] for i in items if isinstance(i, dict) and "identifier" in i)
        cursor = doc.get("cursor")
        if not cursor or not items:
            return


def _advanced(config: CrawlConfig, policy: Policy, client: httpx.Client):
    page = 1
    while True:
        query = [("q", f"collection:{config.collection}"), ("fl[]", "identifier"),
                 ("sort[]", "identifier asc"), ("rows", config.page_size), ("page", page),
                 ("output", "json")]  # fmt: skip
        doc = _json(client, f"{config.archive_url.rstrip('/')}/advancedsearch.php?"
                    + urlencode(query), policy)  # fmt: skip
        response = doc.get("response") if isinstance(doc, dict) else None
        docs = response.get("docs") if isinstance(response, dict) else None
        if not isinstance(docs, list):
            raise AglError("crawl: the advanced search API answered without response.docs")
        yield from (d["identifier"] for d in docs if isinstance(d, dict) and "identifier" in d)
        total = int(response.get("numFound", 0))
        if not docs or page * config.page_size >= total:
            return
        page += 1


def _json(client, url: str, policy: Policy):

    try:
        return get_json(client, url, policy)
    except Exception as exc:  # _Final / _Retryable from the shared retry loop
        if isinstance(exc, AglError):
            raise
        raise AglError(f"crawl: {url}: {exc}; check --archive-url and rerun") from None


def _read_items(identifiers, config, policy, client):
    """Each item's metadata (in parallel), parsed; returns (items in list order, skipped)."""

    stop = threading.Event()

    def one(ident: str):
        if not is_plain_name(ident):
            return ident, None, "identifier is not a plain name"
        url = f"{config.archive_url.rstrip('/')}/metadata/{quote(ident, safe='')}"
        try:
            doc = get_json(client, url, policy, stop)
        except Exception as exc:  # noqa: BLE001 - reported per item, the crawl goes on
            return ident, None, f"metadata unavailable: {exc}"
        item, reason = parse_item(ident, doc)
        return ident, item, reason

    with ThreadPoolExecutor(max_workers=max(1, config.jobs)) as pool:
        results = list(pool.map(one, identifiers))
    items = [item for _, item, _ in results if item is not None]
    skipped = {ident: reason for ident, item, reason in results if item is None}
    return items, skipped


def parse_item(ident: str, doc: object) -> tuple[_Item | None, str | None]:
    """One item's metadata as a manifest row, or None and the reason it cannot be one."""
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        return None, "no metadata (empty or dark item)"
    md = doc["metadata"]
    position = _position(md)
    if position is None:
        return None, "no coordinates in the item's metadata"
    mp3 = _mp3(doc.get("files"))
    if isinstance(mp3, str):
        return None, mp3
    name, seconds = mp3
    return _Item(
        key=ident,
        title=_text(md.get("title")),
        description=_text(md.get("description")),
        latitude=position[0],
        longitude=position[1],
        altitude=_float(_first(md.get("altitude")) or _first(md.get("alt"))),
        mp3name=name,
        seconds=seconds,
    ), None


def _position(md: dict) -> tuple[float, float] | None:
    lat = next((_float(_first(md.get(k))) for k in _LAT_KEYS if md.get(k) is not None), None)
    lon = next((_float(_first(md.get(k))) for k in _LON_KEYS if md.get(k) is not None), None)
    if lat is None or lon is None:
        for value in _as_list(md.get("coverage")):  # "52.4965, 13.4286" in the coverage field
            m = _PAIR.search(str(value))
            if m:
                lat, lon = float(m.group(1)), float(m.group(2))
                break
    if lat is None or lon is None or not (-90 <= lat <= 90 and -180 <= lon <= 180):
        return None
    if lat == 0 and lon == 0:
        return None  # "0, 0" is a missing position written as a number, not a place at sea
    return lat, lon


def _mp3(files: object) -> tuple[str, float] | str:
    """The item's MP3 (the original upload first) and its duration, or why there is none."""
    if not isinstance(files, list):
        return "no file list"
    mp3s = [f for f in files if isinstance(f, dict) and str(f.get("name", "")).lower()
            .endswith(".mp3")]  # fmt: skip
    if not mp3s:
        return "no MP3 file"
    mp3s.sort(key=lambda f: f.get("source") != "original")
    chosen = mp3s[0]
    name = str(chosen["name"])
    if not is_plain_name(name):
        return f"MP3 file name {name!r} is not a plain name"
    seconds = _duration(chosen.get("length"))
    if seconds is None:
        return f"no duration for {name}"
    return name, seconds


def _duration(value: object) -> float | None:
    """The Archive's `length`: seconds ("128.09") or a clock ("2:08", "1:02:08")."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        if ":" in text:
            total = 0.0
            for part in text.split(":"):
                total = total * 60 + float(part)
            return total if total > 0 else None
        seconds = float(text)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _as_list(value: object) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _first(value: object) -> object:
    values = _as_list(value)
    return values[0] if values else None


def _float(value: object) -> float | None:
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _text(value: object) -> str:
    return " ".join(str(v).strip() for v in _as_list(value))


def to_frame(items: list[_Item]) -> pd.DataFrame:
    """Manifest rows in AGL1K's column order, with places from the offline gazetteer."""
    import pandas as pd

    places = reverse_geocode([(i.latitude, i.longitude) for i in items])
    rows = []
    for item, (city, country, continent) in zip(items, places, strict=True):
        short = item.key.rsplit("_", 1)[-1]
        rows.append({
            "key": item.key,
            "short_key": short if short.isdigit() else "",
            "longitude": item.longitude,
            "latitude": item.latitude,
            "altitude": "" if item.altitude is None else item.altitude,
            "description": item.description,
            "title": item.title,
            "mp3name": item.mp3name,
            "mp3seconds": item.seconds,
            "city": city,
            "country": country,
            "continent": continent,
            **dict.fromkeys(CATEGORY_COLUMNS, ""),  # not published: the tag stage listens
        })  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))


def reverse_geocode(points: list[tuple[float, float]]) -> list[tuple[str, str, str]]:
    """(city, country, continent) for each (lat, lon), offline.

    City: the nearest GeoNames place of over 1,000 people (reverse_geocoder). Country and
    continent: country_converter's short name and seven-continent class of the ISO code, so
    the Americas split into North and South America as AGL1K has them.
    """
    if not points:
        return []
    import country_converter as coco
    import reverse_geocoder as rg

    found = rg.RGeocoder(mode=1, verbose=False).query(points)
    converter = coco.CountryConverter()
    codes = sorted({f["cc"] for f in found})
    names = dict(zip(codes, _as_list(converter.convert(codes, src="ISO2", to="name_short",
                                                       not_found="")), strict=True))  # fmt: skip
    continents = dict(zip(codes, _as_list(converter.convert(codes, src="ISO2", to="Continent_7",
                                                            not_found="")), strict=True))  # fmt: skip
    return [(f["name"], names[f["cc"]], continents[f["cc"]]) for f in found]


def write_report(path: Path, report: CrawlReport) -> None:
    """The crawl's counts and every skipped item with its reason, as JSON."""
    doc = {"listed": report.listed, "kept": report.kept, "skipped": report.skipped}
    diskwrite.write_text(path, dumps(doc, indent=1, sort_keys=True) + "\n")


def print_report(report: CrawlReport) -> None:
    """The crawl's counts and its skip reasons, most frequent first, on stderr."""
    print(f"agl crawl: {report.line()}", file=sys.stderr)
    reasons: dict[str, int] = {}
    for reason in report.skipped.values():
        reasons[reason.split(":")[0]] = reasons.get(reason.split(":")[0], 0) + 1
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"agl crawl:   skipped {n}: {reason}", file=sys.stderr)
