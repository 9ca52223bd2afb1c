"""Curation: acoustic filtering, sound tagging, localizability selection and its sensitivity."""
