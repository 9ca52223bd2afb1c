"""The frozen records every floor shares, and nothing else: pure data, no I/O.

* `agl.contracts.calls`  `Request`, `Reply`, `ReplyStatus`: one call to a model and its answer
                         (what backends answer, the runner retries and caches, judges read).
* `agl.contracts.models` `ModelSpec` and its parser `parse_models`: one entry of params.yaml
                         `models:` (what inference runs, and evaluate and the report name).

This package imports only `agl.core` and `agl.errors`, so any package may import it.
"""
