"""The reply parser: every shape of reply the issue names, each with an explicit outcome."""

import pytest

from agl.predictions.parse import parse_reply
from agl.predictions.records import Status

GOOD = '{"reasoning": "Gulls and an adhan", "city": "Essaouira", "country": "Morocco", ' \
       '"continent": "Africa", "latitude": 31.51, "longitude": -9.77, "confidence": 0.8}'


def test_plain_json_is_ok():
    p = parse_reply("a", GOOD)
    assert p.status is Status.OK
    assert (p.latitude, p.longitude, p.city, p.country, p.continent) == (31.51, -9.77, "Essaouira", "Morocco", "Africa")
    assert p.reasoning == "Gulls and an adhan" and p.confidence == 0.8
    assert p.raw_reply == GOOD


def test_json_in_code_fence_with_prose():
    p = parse_reply("a", f"Here is my answer:\n```json\n{GOOD}\n```\nHope this helps!")
    assert p.status is Status.OK and p.city == "Essaouira"


def test_json_surrounded_by_prose_without_fence():
    p = parse_reply("a", f"I think it is Morocco. {GOOD} That is my final answer.")
    assert p.status is Status.OK and p.longitude == -9.77


def test_trailing_commas_and_missing_commas():
    text = '{\n "reason": "waves"\n "city": "Lisbon",\n "country": "Portugal",\n' \
           ' "continent": "Europe",\n "latitude": 38.7,\n "longitude": -9.1,\n}'
    p = parse_reply("a", text)
    assert p.status is Status.OK and p.reasoning == "waves" and p.latitude == 38.7


def test_single_quotes():
    p = parse_reply("a", "{'city': 'Lima', 'country': 'Peru', 'continent': 'South America', "
                         "'latitude': -12.05, 'longitude': -77.04}")
    assert p.status is Status.OK and p.country == "Peru"


def test_numbers_given_as_strings():
    p = parse_reply("a", '{"city": "Oslo", "country": "Norway", "continent": "Europe", '
                         '"latitude": "59.91", "longitude": "10.75"}')
    assert p.status is Status.OK and p.latitude == pytest.approx(59.91)


@pytest.mark.parametrize(
    ("lat", "lon", "want"),
    [
        ('"40.71° N"', '"74.01° W"', (40.71, -74.01)),
        ('"S 33.87"', '"E 151.21"', (-33.87, 151.21)),
        ('"33°52\'S"', '"151°12\'E"', (-33.0 - 52 / 60, 151.2)),
    ],
)
def test_hemisphere_letters(lat, lon, want):
    p = parse_reply(
        "a", f'{{"city": "x", "country": "y", "continent": "z", "latitude": {lat}, "longitude": {lon}}}'
    )
    assert p.status is Status.OK
    assert p.latitude == pytest.approx(want[0]) and p.longitude == pytest.approx(want[1])


def test_swapped_coordinates_are_put_back():
    # longitude 139.7 cannot be a latitude: the model swapped them.
    p = parse_reply("a", '{"city": "Tokyo", "country": "Japan", "continent": "Asia", '
                         '"latitude": 139.69, "longitude": 35.69}')
    assert (p.latitude, p.longitude) == (35.69, 139.69)
    assert p.meta["parse_notes"]["swapped"] == "latitude out of range"


def test_swapped_by_hemisphere_letters():
    p = parse_reply("a", '{"city": "x", "country": "y", "continent": "z", '
                         '"latitude": "2.35 E", "longitude": "48.85 N"}')
    assert (p.latitude, p.longitude) == (48.85, 2.35)


def test_out_of_range_coordinates_are_missing_not_zero():
    p = parse_reply("a", '{"city": "x", "country": "y", "continent": "z", "latitude": 95.0, "longitude": 200.0}')
    assert p.status is Status.PARTIAL
    assert p.latitude is None and p.longitude is None
    assert set(p.missing) == {"latitude", "longitude"}


def test_missing_fields_are_partial_and_named():
    p = parse_reply("a", '{"country": "France", "continent": "Europe"}')
    assert p.status is Status.PARTIAL
    assert p.missing == ("latitude", "longitude", "city")
    assert p.country == "France"


def test_refusal_in_words():
    p = parse_reply("a", "I'm sorry, but I cannot determine the location from this audio.")
    assert p.status is Status.REFUSED and p.refused
    assert p.latitude is None


def test_refusal_as_unknown_fields():
    p = parse_reply("a", '{"city": "Unknown", "country": "Unknown", "continent": "Unknown", '
                         '"latitude": "N/A", "longitude": "N/A"}')
    assert p.status is Status.REFUSED and p.refused


def test_zero_zero_is_a_refusal_not_a_place():
    p = parse_reply("a", '{"city": "Unknown", "country": "Unknown", "continent": "Unknown", '
                         '"latitude": 0, "longitude": 0}')
    assert p.status is Status.REFUSED and p.latitude is None


def test_partial_refusal_keeps_what_was_given():
    p = parse_reply("a", '{"city": "Unknown", "country": "Germany", "continent": "Europe", '
                         '"latitude": 51.0, "longitude": 10.0}')
    assert p.status is Status.PARTIAL and p.missing == ("city",) and p.refused


def test_unparseable_gibberish():
    p = parse_reply("a", "glorp zzz 12 ### ]]")
    assert p.status is Status.UNPARSEABLE and p.error and not p.refused


def test_empty_reply_is_unparseable():
    assert parse_reply("a", "").status is Status.UNPARSEABLE
    assert parse_reply("a", None).status is Status.UNPARSEABLE


def test_key_value_prose_is_read():
    text = "**City:** Kyoto\n**Country:** Japan\n**Continent:** Asia\n**Latitude:** 35.01\n**Longitude:** 135.77"
    p = parse_reply("a", text)
    assert p.status is Status.OK and p.city == "Kyoto" and p.longitude == 135.77


def test_truncated_reply_keeps_fields_before_the_cut():
    p = parse_reply("a", '{"city": "Cairo", "country": "Egypt", "continent": "Africa", "latitude": 30.04')
    assert p.status is Status.PARTIAL and p.latitude == 30.04 and p.missing == ("longitude",)


@pytest.mark.parametrize(("raw", "want"), [("85%", 0.85), (70, 0.7), ("0.3", 0.3), ("high", 0.75)])
def test_confidence_forms(raw, want):
    import json

    p = parse_reply("a", json.dumps({"city": "x", "country": "y", "continent": "z",
                                     "latitude": 1, "longitude": 2, "confidence": raw}))
    assert p.confidence == pytest.approx(want)


@pytest.mark.parametrize("latitude", ["NaN", "Infinity", "9" * 400, '"1e400"'])
def test_a_non_finite_or_overflowing_coordinate_is_missing_not_a_number(latitude):
    reply = ('{"city": "Oslo", "country": "Norway", "continent": "Europe", '
             f'"latitude": {latitude}, "longitude": 10.75}}')
    p = parse_reply("k", reply)
    assert p.latitude is None and "latitude" in p.missing
    assert p.status is Status.PARTIAL and p.longitude == 10.75
