"""Covariates of a recording place's country, offline, each with its source and version.

* income: the World Bank income level in hdx-python-country's bundled Countries &
  Territories taxonomy (`Country.countriesdata(use_live=False)`: the file in its wheel, never
  the network), for 215 territories; Taiwan is High there.
* region / subregion: the UN M49 region and sub-region of the same file.
* language: the country's most spoken language (CLDR's territory language shares, from
  babel), by its English name ("Chinese (Traditional)" for Taiwan).

A country the source does not list gets `None`: the groups call it "unlisted".
"""

from __future__ import annotations

import functools
import importlib.metadata

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
