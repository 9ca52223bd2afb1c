"""Prediction records, reply parsing and importing published predictions."""
