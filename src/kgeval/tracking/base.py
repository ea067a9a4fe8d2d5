"""The :class:`Tracker` protocol, the registry of adapters and the values they receive.

An adapter is a class in its own module, imported only by :func:`get_tracker`: the tracking package
(MLflow, Weights & Biases, TensorBoard) is imported when a tracker is asked for, never by ``import kgeval``.
Constructing an adapter imports its package and checks that its destination can be written to (a
tracking server answers, a directory can be made), so a missing package or an unreachable server is
one :class:`TrackerError` before any training.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from .._compat import install_hint
from ..errors import KGEvalError, unknown_name


class TrackerError(KGEvalError):
    """A tracker cannot be used: its package is missing, its server does not answer, it refused a value."""


class MissingTrackerError(TrackerError, ImportError):
    """The package of an experiment tracker is not installed."""


@runtime_checkable
class Tracker(Protocol):
    """One experiment tracker; a run is ``start``, any number of ``log_*`` calls, then ``finish``.

    ``params`` are flat ``{dotted path: scalar}``; ``log_metrics(values, step)`` logs values at an
    epoch (``step``) or, with ``step=None``, the final values of the run (W&B's summary).
    """

    name: str

    def start(self, run_name: str, params: Mapping[str, Any], *, group: str | None = None) -> None: ...

    def set_tags(self, tags: Mapping[str, str]) -> None: ...

    def log_metrics(self, values: Mapping[str, float], step: int | None = None) -> None: ...

    def log_artifact(self, path: str | os.PathLike, name: str | None = None) -> None: ...

    def finish(self, status: str = "FINISHED") -> None: ...


#: tracker name -> (module of its adapter, class, pip extra of kgeval that installs its package)
TRACKERS = {
    "mlflow": ("mlflow_tracker", "MLflowTracker", "mlflow"),
    "wandb": ("wandb_tracker", "WandbTracker", "wandb"),
    "tensorboard": ("tensorboard_tracker", "TensorBoardTracker", "tensorboard"),
    "csv": ("csv_tracker", "CSVTracker", None),
}

#: run statuses an adapter understands (MLflow's names)
STATUSES = ("FINISHED", "FAILED", "KILLED")




def missing(name: str, package: str, exc: ImportError) -> MissingTrackerError:
    """The error of a tracker whose package ``package`` cannot be imported."""
    extra = TRACKERS[name][2]
    return MissingTrackerError(f"the {name} tracker needs the {package} package, which cannot be imported "
                               f"({exc}): {install_hint(extra, package)}")


def get_tracker(name: str, **options) -> Tracker:
    """The adapter of tracker ``name`` (``"mlflow"``, ``"wandb"``, ``"tensorboard"``, ``"csv"``).

    Parameters
    ----------
    name : str
        One of :data:`TRACKERS`.
    **options
        The adapter's own options: ``tracking_uri``, ``experiment`` (MLflow); ``project``,
        ``directory``, ``mode``, ``entity`` (W&B); ``directory`` (TensorBoard, CSV).

    Returns
    -------
    Tracker
        An adapter whose package is imported and whose destination answered.

    Raises
    ------
    MissingTrackerError
        The tracker's package is not installed (the message says which extra installs it).
    TrackerError
        The destination cannot be reached or written.

    Examples
    --------
    >>> import tempfile
    >>> from kgeval.tracking import get_tracker
    >>> tracker = get_tracker("csv", directory=tempfile.mkdtemp())
    >>> tracker.name
    'csv'
    """
    if not isinstance(name, str) or name.lower() not in TRACKERS:
        raise unknown_name("tracker", str(name), TRACKERS)
    module, cls, _ = TRACKERS[name.lower()]
    adapter = getattr(importlib.import_module(f"{__package__}.{module}"), cls)
    return adapter(**options)


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested configuration as ``{dotted path: value}``; lists and ``None`` as JSON text.

    Examples
    --------
    >>> flat_params({"model": {"name": "distmult", "dim": 8}, "sides": ["head", "tail"], "device": None})
    {'model.name': 'distmult', 'model.dim': 8, 'sides': '["head", "tail"]', 'device': 'null'}
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat_params(value, path + "."))
        elif isinstance(value, (bool, int, float, str)):
            out[path] = value
        else:
            out[path] = json.dumps(value, sort_keys=True, default=str)
    return out


def numeric_values(values: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of ``values`` as floats (NaN kept: an undefined metric is logged as NaN, not dropped)."""
    out = {}
    for key, value in values.items():
        if isinstance(value, bool) or value is None:
            continue
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            continue
    return out
