"""The view agl's MLflow experiment opens on: the runs table with the headline metrics.

MLflow 3.17's UI ignores an experiment's `mlflow.experimentKind` tag: a toggle kept in the
browser (*GenAI | Model training*, GenAI in a new browser) decides whether an experiment opens
on its traces or its runs, and the runs table shows no metric until one is picked under
Columns. What that UI does read from the server is a *saved view*: an experiment tag
`mlflow.sharedViewState.<id>` whose value is {name, createdAt, updatedAt, state}, `state` being
the runs page's view as JSON (selected columns, their order, the sort). The runs page lists it
under its Views menu, and `#/experiments/<exp>/runs?viewStateShareKey=<id>` opens it;
`workflowType=machine_learning` in the same URL picks *Model training*. So agl saves one view
(VIEW_NAME) per experiment and prints that URL (`runs_url`). Checked in Chromium against a
real `mlflow ui` 3.17.2: tests/test_mlflow_ui.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

VIEW_ID = "agl-headline"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"
VIEW_NAME = "agl: headline metrics"
# Where `mlflow ui` / `mlflow server` listen unless told otherwise.
DEFAULT_UI = "http://127.0.0.1:5000"


def metric_column(key: str) -> str:
    """The UI's id of a metric's column (its runs table names columns `metrics.`key``)."""
    return f"metrics.`{key}`"


def view_state(metrics: Sequence[str], sort_by: str | None = None) -> dict[str, Any]:
    """The runs page's view: these metrics as columns, in this order, sorted by `sort_by`
    ascending (every headline agl sorts by is an error: smaller is better)."""
    columns = [metric_column(m) for m in metrics]
    state: dict[str, Any] = {"selectedColumns": columns, "columnOrder": columns}
    if sort_by is not None:
        state.update(orderByKey=metric_column(sort_by), orderByAsc=True)
    return state


def save_view(client: Any, experiment_id: str, metrics: Sequence[str],
              sort_by: str | None = None) -> bool:
    """Write the experiment's saved view (its tag VIEW_TAG) unless it already holds this
    state; True when written. Its creation time is kept when it is updated."""
    state = json.dumps(view_state(metrics, sort_by), sort_keys=True)
    exp = client.get_experiment(experiment_id)
    old = (exp.tags or {}).get(VIEW_TAG)
    now = int(time.time() * 1000)
    created = now
    if old is not None:
        try:
            envelope = json.loads(old)
            if envelope.get("state") == state and envelope.get("name") == VIEW_NAME:
                return False
            created = int(envelope.get("createdAt", now))
        except (ValueError, TypeError, AttributeError):
            pass  # a tag someone else wrote, not a view: replaced by agl's
    value = json.dumps({"name": VIEW_NAME, "createdAt": created, "updatedAt": now, "state": state})
    client.set_experiment_tag(experiment_id, VIEW_TAG, value)
    return True


def ui_base(tracking_uri: str) -> str:
    """The UI's address for a tracking URI: an http(s) server serves its own UI (without any
    user:password of the URI); a database or folder is opened with `mlflow ui`, DEFAULT_UI."""
    parts = urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https"):
        return DEFAULT_UI
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def runs_url(experiment_id: str, base: str = DEFAULT_UI) -> str:
    """The URL that opens the experiment's runs table on agl's saved view."""
    return (f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs"
            f"?viewStateShareKey={VIEW_ID}&workflowType=machine_learning")
