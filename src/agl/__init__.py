"""agl: the AGL1K audio geo-localization benchmark as a reproducible experiment."""

__version__ = "0.1.0"
