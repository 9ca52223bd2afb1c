"""Scoring: protocols, metrics with confidence intervals, evaluate, leaderboard."""
