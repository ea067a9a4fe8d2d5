"""The MLflow tracker, through :class:`mlflow.tracking.MlflowClient` (no global active run is touched).

The tracking URI is the one given, else MLflow's own (``MLFLOW_TRACKING_URI``, else
``sqlite:///mlflow.db`` in the working directory since MLflow 3). A local store is a SQLite database,
``sqlite:///path/to/mlflow.db``: MLflow 3 refuses the older ``file:`` store unless
``MLFLOW_ALLOW_FILE_STORE=true``; with a SQLite store a new experiment's artifacts go where MLflow puts
them (``./mlruns`` of the working directory) unless ``artifact_location`` is given. An ``http(s)://`` server is asked for ``/health`` with a
:data:`CONNECT_TIMEOUT` before any run; MLflow itself would retry for minutes.

Metric and tag names keep kgeval's keys; a character MLflow refuses in a name (it allows letters,
digits and ``_ - . : / space``) becomes ``_``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import TrackerError, missing

#: seconds to wait for a tracking server's answer
CONNECT_TIMEOUT = 10
#: the experiment of runs when none is given and ``MLFLOW_EXPERIMENT_NAME`` is unset
DEFAULT_EXPERIMENT = "kgeval"
#: MLflow's limits: entries per log_batch call, and characters of a parameter value
MAX_BATCH = 100
MAX_PARAM_CHARS = 6000
_BAD_NAME = re.compile(r"[^\w\-. :/]")


def _name(key: str) -> str:
    return _BAD_NAME.sub("_", key)


def check_server(uri: str) -> None:
    """Refuse an ``http(s)`` tracking URI whose server does not answer ``/health``."""
    import urllib.error
    import urllib.request

    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=CONNECT_TIMEOUT):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise TrackerError(f"the MLflow tracking server at {uri} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TrackerError(f"cannot reach the MLflow tracking server at {uri}: {reason}; start it or give "
                           "another tracking URI (e.g. sqlite:///mlflow.db for a local store)") from None


class MLflowTracker:
    """Log runs to MLflow: ``tracking_uri`` (default: MLflow's), ``experiment`` (made if absent, with
    ``artifact_location`` if given)."""

    name = "mlflow"

    def __init__(self, tracking_uri: str | None = None, experiment: str | None = None,
                 artifact_location: str | None = None):
        try:
            import mlflow
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise missing("mlflow", "mlflow", exc) from None
        self.tracking_uri = tracking_uri or mlflow.get_tracking_uri()
        self.experiment = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        if self.tracking_uri.startswith(("http://", "https://")):
            check_server(self.tracking_uri)
        try:
            self.client = MlflowClient(tracking_uri=self.tracking_uri)
            found = self.client.get_experiment_by_name(self.experiment)
            self.experiment_id = found.experiment_id if found is not None else \
                self.client.create_experiment(self.experiment, artifact_location=artifact_location)
        except Exception as exc:  # MlflowException, SQLAlchemy errors: one line naming the store
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TrackerError(f"the MLflow tracking store {self.tracking_uri} cannot be used: {first}") from None
        #: the id of the current (or last) run
        self.run_id: str | None = None

    def start(self, run_name: str, params: Mapping[str, Any], *, group: str | None = None) -> None:
        from mlflow.entities import Param

        tags = {"kgeval.group": group} if group else None
        self.run_id = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags).info.run_id
        items = [Param(_name(k), str(v)[:MAX_PARAM_CHARS]) for k, v in params.items()]
        for i in range(0, len(items), MAX_BATCH):
            self.client.log_batch(self.run_id, params=items[i:i + MAX_BATCH])

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(_name(k), str(v)) for k, v in tags.items()]
        for i in range(0, len(items), MAX_BATCH):
            self.client.log_batch(self.run_id, tags=items[i:i + MAX_BATCH])

    def log_metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(_name(k), float(v), now, 0 if step is None else int(step)) for k, v in values.items()]
        for i in range(0, len(items), MAX_BATCH):
            self.client.log_batch(self.run_id, metrics=items[i:i + MAX_BATCH])

    def log_artifact(self, path: str | os.PathLike, name: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), name or path.name)
        else:
            self.client.log_artifact(self.run_id, str(path))

    def finish(self, status: str = "FINISHED") -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id, status)
