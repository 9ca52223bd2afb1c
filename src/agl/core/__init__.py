"""Shared plumbing: canonical writers, tracking, geodesy, audio decoding, secrets, the world map."""
