"""The process's one country_converter: building a `CountryConverter` reads and indexes its
country table (~0.2 s of CPU), and strict scoring, the reverse geocoder's names and the speech
census each built their own, twice per evaluate stage."""

from __future__ import annotations

import functools
import logging


@functools.cache
def converter():
    """country_converter's `CountryConverter`, built once per process; its log of names it
    cannot match is silenced (callers name what they do with an unknown name)."""
    import country_converter as coco  # its import takes ~0.7 s: only a caller that converts pays it

    logging.getLogger("country_converter").setLevel(logging.ERROR)
    return coco.CountryConverter()
