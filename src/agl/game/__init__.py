"""The human baseline: a local listening game (`agl play`) whose guesses are a model run."""
