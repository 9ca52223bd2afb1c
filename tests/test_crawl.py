"""`agl crawl` against a local fake of the Archive's search and metadata APIs."""

from __future__ import annotations

import json
import math
import warnings

import pytest
from fake_archive import FakeArchive

from agl.cli import main
from agl.dataset.crawl import CrawlConfig, list_items, parse_item, reverse_geocode
from agl.dataset.fetch import Policy, make_client
from agl.dataset.manifest import CATEGORY_COLUMNS, COLUMNS, load_manifest


def _item(ident, md, files):
    return {"metadata": {"identifier": ident, "collection": ["aporee"], **md}, "files": files}


def _mp3(name, length, source="original"):
    return {"name": name, "source": source, "format": "VBR MP3", "length": length}


# Real coordinates and file names of the two clips in ../shared; the rest exercise the rules.
ITEMS = {
    "aporee_5201_6631": _item(
        "aporee_5201_6631",
        {"title": "berlin, amsel", "description": "blackbird", "latitude": "52.4965138837",
         "longitude": "13.428567946", "altitude": "38"},
        [_mp3("AmselanDietersFensterJuni2003Edit.mp3", "140.387375"),
         _mp3("AmselanDietersFensterJuni2003Edit_64kb.mp3", "140.4", source="derivative"),
         {"name": "aporee_5201_6631_meta.xml", "source": "original"}],
    ),
    "aporee_26839_30948": _item(
        "aporee_26839_30948",
        {"title": ["Battlements and Muezzin"], "description": ["Remparts", "et Muezzin."],
         "coverage": "31.51633429397, -9.766309261322"},
        [_mp3("20020207EssaouiraRempartsMuezzin.mp3", "2:08.09")],
    ),
    "aporee_1_10": _item("aporee_1_10", {"lat": 41.9029, "lng": 12.4534},
                         [_mp3("rome.mp3", "61")]),
    "aporee_1_11": _item("aporee_1_11", {"latitude": -22.9519, "longitude": -43.2105},
                         [_mp3("rio.mp3", "90.5")]),
    "aporee_1_12": _item("aporee_1_12", {"latitude": 40.7580, "longitude": -73.9855},
                         [_mp3("nyc.mp3", "1:00:01")]),
    "aporee_2_20": _item("aporee_2_20", {"title": "somewhere"}, [_mp3("x.mp3", "12")]),
    "aporee_2_21": _item("aporee_2_21", {"coverage": "0, 0"}, [_mp3("x.mp3", "12")]),
    "aporee_2_22": _item("aporee_2_22", {"latitude": 10, "longitude": 10},
                         [_mp3("sub/x.mp3", "12")]),
    "aporee_2_23": _item("aporee_2_23", {"latitude": 10, "longitude": 10},
                         [{"name": "x.flac", "source": "original"}]),
    "aporee_2_24": _item("aporee_2_24", {"latitude": 10, "longitude": 10}, [_mp3("x.mp3", "")]),
    "aporee_2_25": None,  # listed by search, but its metadata is gone (404)
}  # fmt: skip
KEPT = ["aporee_5201_6631", "aporee_26839_30948", "aporee_1_10", "aporee_1_11", "aporee_1_12"]


def _scrape(path, query):
    """Three identifiers a page, cursor-paged (scrape) or page-numbered (advancedsearch)."""
    idents = list(ITEMS)
    if path.endswith("scrape"):
        assert query["q"] == ["collection:aporee"]
        start = int(query.get("cursor", ["0"])[0])
        page = idents[start : start + 3]
        doc = {"items": [{"identifier": i} for i in page], "count": len(page),
               "total": len(idents)}  # fmt: skip
        if start + 3 < len(idents):
            doc["cursor"] = str(start + 3)
        return 200, doc
    rows, page = int(query["rows"][0]), int(query["page"][0])
    docs = [{"identifier": i} for i in idents[(page - 1) * rows : page * rows]]
    return 200, {"response": {"numFound": len(idents), "start": 0, "docs": docs}}


@pytest.fixture
def archive(archive_dir):
    server = FakeArchive(root=archive_dir, scrape=_scrape)
    server.metadata.update({k: v for k, v in ITEMS.items() if v is not None})
    server.start()
    yield server
    server.stop()


def test_crawl_writes_a_valid_manifest_reverse_geocoded_offline(archive, tmp_path, capsys):
    out, report = tmp_path / "pool.csv", tmp_path / "report.json"
    code = main(["crawl", "--out", str(out), "--report", str(report),
                 "--archive-url", archive.url, "--page-size", "3"])  # fmt: skip
    assert code == 0
    assert tuple(out.read_text().splitlines()[0].split(",")) == COLUMNS
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = load_manifest(out).set_index("key")
    assert list(frame.index) == KEPT
    places = frame[["city", "country", "continent"]].apply(tuple, axis=1).to_dict()
    assert places["aporee_5201_6631"] == ("Berlin Treptow", "Germany", "Europe")  # as AGL1K
    assert places["aporee_26839_30948"] == ("Essaouira", "Morocco", "Africa")
    assert places["aporee_1_10"] == ("Vatican City", "Vatican", "Europe")
    assert places["aporee_1_11"][1:] == ("Brazil", "South America")
    assert places["aporee_1_12"][1:] == ("United States", "North America")
    berlin = frame.loc["aporee_5201_6631"]
    assert berlin["mp3name"] == "AmselanDietersFensterJuni2003Edit.mp3"  # the original upload
    assert berlin["mp3seconds"] == 140.387375 and berlin["altitude"] == "38.0"
    assert berlin["short_key"] == "6631"
    essaouira = frame.loc["aporee_26839_30948"]
    assert essaouira["mp3seconds"] == pytest.approx(128.09)
    assert essaouira["description"] == "Remparts et Muezzin."
    assert frame.loc["aporee_1_12", "mp3seconds"] == 3601
    # categories are not published: left empty (NaN), for the tag stage, never guessed as 0
    assert frame[list(CATEGORY_COLUMNS)].isna().all().all()

    skipped = json.loads(report.read_text())["skipped"]
    assert skipped == {
        "aporee_2_20": "no coordinates in the item's metadata",
        "aporee_2_21": "no coordinates in the item's metadata",
        "aporee_2_22": "MP3 file name 'sub/x.mp3' is not a plain name",
        "aporee_2_23": "no MP3 file",
        "aporee_2_24": "no duration for x.mp3",
        "aporee_2_25": skipped["aporee_2_25"],
    }
    assert skipped["aporee_2_25"].startswith("metadata unavailable: not found (HTTP 404)")
    assert "11 item(s) listed, 5 kept, 6 skipped" in capsys.readouterr().err
    scrapes = archive.requests("/services/search/v1/scrape")
    assert len(scrapes) == 4  # 11 identifiers, three a page, followed by cursor
    assert all(r.path.startswith(("/services/", "/metadata/")) for r in archive.log)


def test_the_crawled_pool_downloads(archive, archive_dir, tmp_path):
    pool = tmp_path / "pool.csv"
    assert main(["crawl", "--out", str(pool), "--archive-url", archive.url]) == 0
    out = tmp_path / "data"
    code = main(["download", "--params", str(tmp_path / "none.yaml"), "--dataset", str(pool),
                 "--out", str(out), "--base-url", f"{archive.url}/download",
                 "--metadata-url", f"{archive.url}/metadata", "--no-progress",
                 "--failure-budget", "3"])  # fmt: skip
    assert code == 0  # the two real clips arrive; the three invented ones 404, within budget
    for src in archive_dir.glob("*/*.mp3"):
        assert (out / "audio" / src.parent.name / src.name).read_bytes() == src.read_bytes()


def test_advanced_search_pages_and_limit(archive):
    policy = Policy(progress=False, sleep=lambda s: None)
    with make_client(policy) as client:
        config = CrawlConfig(archive_url=archive.url, search_api="advancedsearch", page_size=4)
        assert list_items(config, policy, client) == list(ITEMS)
        assert len(archive.requests("/advancedsearch.php")) == 3
        limited = CrawlConfig(archive_url=archive.url, page_size=100, limit=4)
        assert list_items(limited, policy, client) == list(ITEMS)[:4]


def test_a_failing_search_api_is_one_clear_error(archive, tmp_path, capsys):
    archive.faults["/services/search/v1/scrape"] = ["500", "500", "500"]
    code = main(["crawl", "--out", str(tmp_path / "p.csv"), "--archive-url", archive.url,
                 "--retries", "2"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "HTTP 500" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "p.csv").exists()


def test_parse_item_rules():
    item, reason = parse_item("aporee_1_2", {"metadata": {"coverage": ["Berlin", "52.5;13.4"]},
                                             "files": [_mp3("a.mp3", "5")]})  # fmt: skip
    assert reason is None and (item.latitude, item.longitude, item.seconds) == (52.5, 13.4, 5.0)
    assert parse_item("x", {})[1] == "no metadata (empty or dark item)"
    assert parse_item("x", {"metadata": {"latitude": "95", "longitude": "1"}})[0] is None
    item, _ = parse_item("x", {"metadata": {"latitude": "1", "longitude": "2", "altitude": "n/a"},
                               "files": [_mp3("a.mp3", "nan")]})  # fmt: skip
    assert item is None


def test_reverse_geocode_is_offline_and_vectorised():
    got = reverse_geocode([(35.0116, 135.7681), (-33.9249, 18.4241), (-41.2865, 174.7762)])
    assert [g[1:] for g in got] == [("Japan", "Asia"), ("South Africa", "Africa"),
                                    ("New Zealand", "Oceania")]  # fmt: skip
    assert all(isinstance(g[0], str) and g[0] for g in got)
    assert reverse_geocode([]) == [] and not math.isnan(1.0)
