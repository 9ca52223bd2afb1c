"""The reply parser against a corpus of hand-written malformed replies, and against the
authors' real Gemini 3 Pro replies with their own parse beside them.

Every reply below was written for this test (none is copied from a published run). Each
shape is one that real models produce: a stray opening before the object, a wrapper key
around it, stray characters after it, a fence that never closes, prose around it, and
reasoning text that itself holds quotes, braces and colons.
"""

from __future__ import annotations

import json

import pytest
from helpers import shared_path

from agl.predictions.importer import from_published_row
from agl.predictions.parse import parse_reply
from agl.predictions.records import Status

GEMINI = "data/agl1k/published/gemini-3-pro-preview/seed_42_ABCD.jsonl"  # under ../shared (or AGL_SHARED)

LONDON = (
    '"city": "London", "country": "United Kingdom", "continent": "Europe", "longitude": -0.1278, "latitude": 51.5074'
)
OSLO = (
    '"city": "Oslo",\n  "country": "Norway",\n  "continent": "Europe",\n  "longitude": 10.7522,\n  "latitude": 59.9139'
)
LIMA = '"city": "Lima", "country": "Peru", "continent": "South America", "longitude": -77.0428, "latitude": -12.0464'
WANT_LONDON = ("London", "United Kingdom", 51.5074, -0.1278)
WANT_OSLO = ("Oslo", "Norway", 59.9139, 10.7522)
WANT_LIMA = ("Lima", "Peru", -12.0464, -77.0428)

# (reply, expected): expected is (city, country, lat, lon) for status ok, else a Status.
CORPUS: list[tuple[str, object]] = [
    # -- already handled shapes (kept so the corpus pins them too)
    ('{"reason": "bells", ' + LONDON + "}", WANT_LONDON),
    ("```json\n{" + LONDON + "}\n```", WANT_LONDON),
    ("My answer: {" + LONDON + "} Thanks.", WANT_LONDON),
    ("{\n  " + OSLO + ",\n}", WANT_OSLO),
    (
        "{'city': 'Lima', 'country': 'Peru', 'continent': 'South America', "
        "'longitude': -77.0428, 'latitude': -12.0464}",
        WANT_LIMA,
    ),
    (
        '{"city": "Oslo", "country": "Norway", "continent": "Europe", "longitude": "10.7522", "latitude": "59.9139"}',
        WANT_OSLO,
    ),
    ("City: Oslo\nCountry: Norway\nContinent: Europe\nLatitude: 59.9139\nLongitude: 10.7522", WANT_OSLO),
    # -- a stray opening before the real object
    ('{"{"reason": "Traffic and a red bus.", ' + LONDON + "}", WANT_LONDON),
    ('{{"reason": "Traffic and a red bus.", ' + LONDON + "}", WANT_LONDON),
    ('{"{\n  "reason": "Fjord gulls",\n  ' + OSLO + "\n}", WANT_OSLO),
    ('{ "{"reason": "Spanish, with a coastal accent", ' + LIMA + "}", WANT_LIMA),
    ('"{"reason": "bus", ' + LONDON + "}", WANT_LONDON),
    ('{"{"reason": "bus", ' + LONDON + "}\n```", WANT_LONDON),
    # -- a wrapper key around the object, with or without a closing brace
    ('{"json": {\n "reason": "Fjord gulls",\n ' + OSLO + "\n}}", WANT_OSLO),
    ('{"json": {\n "reason": "Fjord gulls",\n ' + OSLO + "\n}", WANT_OSLO),
    ('{"json": {\n "reason": "Fjord gulls",\n ' + OSLO + "\n", WANT_OSLO),
    ('{"answer": {"reason": "bus", ' + LONDON + "}}", WANT_LONDON),
    ('{"json" {"reason": "bus", ' + LONDON + "}}", WANT_LONDON),
    ('json{"reason": "bus", ' + LONDON + "}", WANT_LONDON),
    ('{"response": {"reason": "ocean and Spanish", ' + LIMA + "}}}", WANT_LIMA),
    # -- stray trailing characters after a complete object
    ('{"reason": "bus", ' + LONDON + '}"}', WANT_LONDON),
    ('{"reason": "bus", ' + LONDON + "}}}", WANT_LONDON),
    ('{"reason": "bus", ' + LONDON + '}"', WANT_LONDON),
    ('{"reason": "bus", ' + LONDON + '}\n"}\n```', WANT_LONDON),
    ("```json\n{" + LONDON + "}", WANT_LONDON),
    ("```json\n{\n  " + OSLO + "\n}\n", WANT_OSLO),
    ("```\n{" + LIMA + "}\nThat is all.", WANT_LIMA),
    # -- inside prose
    ('Listening closely, I would say: {"{"reason": "bus", ' + LONDON + '}"} Hope it helps.', WANT_LONDON),
    ('Here you go.\n{"json": {"reason": "gulls", ' + OSLO + "}\nLet me know.", WANT_OSLO),
    ('After analysis the answer is {"reason": "Quechua words", ' + LIMA + '}"}. Final.', WANT_LIMA),
    # -- reasoning that holds quotes, braces or colons
    ('{"reason": "A voice says "mind the gap": the Tube.", ' + LONDON + "}", WANT_LONDON),
    ('{"reason": "Sign reads {Exit}, and a {stray brace", ' + LONDON + "}", WANT_LONDON),
    ('{"{"reason": "Announcer: \\"next stop\\" {platform 2}", ' + LONDON + '}"}', WANT_LONDON),
    ('{"json": {"reason": "Ratio 3:1 of gulls: "kree" calls}", ' + OSLO + "}}", WANT_OSLO),
    ('{"reason": "Spanish "ceviche" vendor: {loud} and \'clear\'", ' + LIMA + "}", WANT_LIMA),
    ('{"reason": "Time 10:45, key: value pairs everywhere", ' + OSLO + "}", WANT_OSLO),
    # -- combinations
    ('```json\n{"{"json": {"reason": "a "red" bus: {London}", ' + LONDON + '}}"}', WANT_LONDON),
    ('Sure! {"json": {"{"reason": "fjord: "ja"", ' + OSLO + "\n", WANT_OSLO),
    ('{"{"reason": "Lima "limeño" accent", ' + LIMA + "}}}\n```\nDone", WANT_LIMA),
    # -- replies that must not become answers
    ("I'm sorry, I cannot determine where this was recorded.", Status.REFUSED),
    ("Unfortunately it is impossible to tell from this audio; sorry.", Status.REFUSED),
    (
        '{"reason": "silence", "city": "Unknown", "country": "Unknown", "continent": "Unknown", '
        '"longitude": 0, "latitude": 0}',
        Status.REFUSED,
    ),
    (
        '{"{"reason": "only wind", "city": "unknown", "country": "n/a", "continent": "none", '
        '"longitude": "N/A", "latitude": "N/A"}"}',
        Status.REFUSED,
    ),
    ("error", Status.UNPARSEABLE),
    ("glorp {zzz} 12: ### ]]", Status.UNPARSEABLE),
    ('{"reason": "I hear wind and nothing else"}', Status.UNPARSEABLE),
    ('{"{"mood": "calm", "tempo": 3}"}', Status.UNPARSEABLE),
]


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 40


@pytest.mark.parametrize(("reply", "want"), CORPUS, ids=[f"r{i:02d}" for i in range(len(CORPUS))])
def test_corpus(reply, want):
    p = parse_reply("s", reply)
    if isinstance(want, Status):
        assert p.status is want, (p.status, p.error)
        assert p.latitude is None and p.longitude is None
        return
    city, country, lat, lon = want
    assert p.status is Status.OK, (p.status, p.error, p.meta)
    assert (p.city, p.country, p.continent is not None) == (city, country, True)
    assert p.latitude == pytest.approx(lat) and p.longitude == pytest.approx(lon)


@pytest.mark.parametrize(
    ("reply", "reasoning"),
    [
        (
            '{"{"reason": "A voice says "mind the gap": the Tube.", ' + LONDON + "}",
            'A voice says "mind the gap": the Tube.',
        ),
        ('{"json": {"reason": "Sign reads {Exit}: go", ' + LONDON + "}}", "Sign reads {Exit}: go"),
        ('{"reason": "line one\\nline \\"two\\"", ' + LONDON + '}"}', 'line one\nline "two"'),
        ('{"reason": "clean", ' + LONDON + "}", "clean"),
    ],
)
def test_reasoning_is_kept_whole(reply, reasoning):
    assert parse_reply("s", reply).reasoning == reasoning


def _gemini_rows() -> list[dict]:
    path = shared_path(GEMINI)  # the one rule: skips in a user's clone, fails in CI
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_gemini_replies_agree_with_the_authors_parse():
    rows = _gemini_rows()
    with_raw = [r for r in rows if r.get("model_output")]
    assert len(with_raw) == 261
    answered = 0
    for row in with_raw:
        authors = from_published_row(row)
        ours = parse_reply(str(row["question_id"]), row["model_output"])
        # Never a silent 0,0, whatever the authors did.
        assert not (ours.latitude == 0 and ours.longitude == 0), row["question_id"]
        if authors.status is Status.OK:
            answered += 1
            assert ours.status is Status.OK, (row["question_id"], ours.error)
            assert ours.country == authors.country, row["question_id"]
            assert abs(ours.latitude - authors.latitude) <= 0.01, row["question_id"]
            assert abs(ours.longitude - authors.longitude) <= 0.01, row["question_id"]
            if authors.reasoning:  # the judges read the reasoning: kept whole, as the authors did
                assert ours.reasoning == authors.reasoning, row["question_id"]
        elif authors.status is Status.REFUSED:
            # A refusal stays one (or an unparseable reply), or becomes a real answer.
            assert ours.status in (Status.REFUSED, Status.UNPARSEABLE, Status.OK), row["question_id"]
            if ours.status is Status.OK:
                assert ours.has_coordinates
    assert answered >= 250


def test_the_authors_parser_port_gives_their_fields_on_every_gemini_reply():
    """agl.predictions.authors.authors_fields, the port of their parse_location_response, writes
    the authors' five parsed fields exactly, row for row, from the raw reply (their defaults
    "Unknown" / 0.0 included). Measured also on their GPT-4o Audio subset (304 rows): exact."""
    from agl.predictions.authors import authors_fields

    rows = [json.loads(line) for line in open(shared_path(GEMINI), encoding="utf-8")]
    for row in rows:
        got = authors_fields(row.get("model_output"))
        for key, value in got.items():
            assert str(value) == str(row[key]) or float(value) == float(row[key]), (row["question_id"], key)
    assert authors_fields('{"a": {"city": "Rome"}}')["predicted_city"] == "Rome"  # the inner flat one
    # theirs reads the first object without braces inside: {"y": 1}, no city
    assert authors_fields('{"city": "Rome", "x": {"y": 1}}')["predicted_city"] == "Unknown"
    assert authors_fields(None) == authors_fields("no json") == authors_fields('{"lat": "north"}')


def test_a_new_run_under_paper_scores_as_the_authors_parser_would(tmp_path, agl1k_manifest):
    """The Gemini subset's raw replies as a run of this project (this project's parser made its
    records): under `paper` it scores exactly the authors' numbers, their 10,000 km rows
    included; this project's parser recovers answers theirs did not (it stays under strict)."""
    import warnings

    from agl.predictions.records import write_predictions
    from agl.scoring.evaluate import evaluate_files

    rows = [json.loads(line) for line in open(shared_path(GEMINI), encoding="utf-8")]
    ours = [parse_reply(str(r["question_id"]), r["model_output"], backend="replay") if r.get("model_output")
            else from_published_row({**r, "model_output": None}) for r in rows]
    ours = [p if p.raw_reply or not p.original else p.__class__(**{**p.__dict__, "original": None}) for p in ours]
    run = tmp_path / "predictions.jsonl"
    write_predictions(run, ours)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new, _ = evaluate_files(run, agl1k_manifest, "paper", bootstrap=0)
        theirs, _ = evaluate_files(shared_path(GEMINI), agl1k_manifest, "paper", bootstrap=0)
    for key in ("n", "distance_error_km", "median_km", "country_acc", "continent_acc", "city_acc",
                "reject_rate", "n_no_coordinates"):
        assert new[key] == pytest.approx(theirs[key], rel=1e-12), key
    assert round(theirs["distance_error_km"], 3) == 2281.667
