"""Running a model over a dataset: runner, response cache, run specs, cost estimates, roster."""
