"""Several trackers used as one (:class:`Trackers`), and what a pipeline run logs to them.

A pipeline run logs, in this order: the resolved configuration as parameters (flat dotted paths) and
the run's tags (dataset, model, split); after every epoch the mean training loss
(``training/loss``, step = epoch) and, at the epochs the early stopper evaluates, its validation value
(``validation/<metric key>``); after the evaluation every value of the results' flat dict under kgeval's
own keys (what ``results.json`` holds under ``metrics``), the protocol's scalar fields as
``protocol.<field>`` tags and the whole protocol as the artifact ``protocol.json``. The caller logs the
run directory once it is saved (:meth:`Trackers.log_artifact`) and ends the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from .base import STATUSES, Tracker, TrackerError, flat_params, get_tracker, numeric_values

#: the metric name of the per-epoch training loss
LOSS_KEY = "training/loss"
#: prefix of the early-stopping validation values
VALIDATION_PREFIX = "validation/"


class Trackers:
    """One or more trackers driven together; a context manager that ends a run left open.

    Parameters
    ----------
    trackers : str, Tracker or an iterable of them
        Tracker names (``"mlflow"``, ``"wandb"``, ``"tensorboard"``, ``"csv"``), each made with
        :func:`~kgeval.tracking.get_tracker` and ``options[name]``, or adapters made already.
    options : mapping, optional
        ``{tracker name: {option: value}}`` (e.g. ``{"mlflow": {"tracking_uri": "sqlite:///m.db"}}``).
    name, group : str, optional
        The name of the next run (default: the caller's) and the group its runs belong to (W&B's group,
        a ``group`` tag elsewhere): :func:`kgeval.hpo_pipeline` names each trial's run in its study.

    Every tracker is made (its package imported, its destination checked) here, before any run.

    Examples
    --------
    >>> import tempfile
    >>> from kgeval.tracking import Trackers
    >>> with Trackers("csv", options={"csv": {"directory": tempfile.mkdtemp()}}) as trackers:
    ...     trackers.start_run("demo", {"model": {"dim": 8}})
    ...     trackers.log_metrics({"training/loss": 0.5}, step=1)
    ...     trackers.end_run()
    >>> trackers.active
    False
    """

    def __init__(self, trackers, *, options: Mapping[str, Mapping[str, Any]] | None = None,
                 name: str | None = None, group: str | None = None):
        items = [trackers] if isinstance(trackers, (str, Tracker)) else list(trackers)
        if not items:
            raise InvalidInputError("trackers: give at least one tracker name (mlflow, wandb, tensorboard, csv)")
        options = dict(options or {})
        self.trackers: list[Tracker] = []
        for item in items:
            if isinstance(item, str):
                self.trackers.append(get_tracker(item, **dict(options.get(item.lower(), {}))))
            elif isinstance(item, Tracker):
                self.trackers.append(item)
            else:
                raise InvalidInputError(f"trackers: expected tracker names or Tracker objects, got {type(item).__name__}")
        self.name, self.group = name, group
        self.active = False

    @classmethod
    def from_specs(cls, specs, *, name: str | None = None, group: str | None = None) -> Trackers | None:
        """The group of command-line specs ``NAME[=LOCATION]`` (:func:`parse_specs`); ``None`` without any."""
        specs = list(specs or ())
        if not specs:
            return None
        names, options = parse_specs(specs)
        return cls(names, options=options, name=name, group=group)

    @classmethod
    def of(cls, trackers) -> tuple[Trackers | None, bool]:
        """``(group, owned)``: ``trackers`` as a group, and whether it was made here (its runs end here)."""
        if trackers is None or isinstance(trackers, Trackers):
            return trackers, False
        if isinstance(trackers, (list, tuple)) and not trackers:  # no tracker asked for
            return None, False
        return cls(trackers), True

    def _each(self, action: Callable[[Tracker], None]) -> None:
        if not self.active:
            raise TrackerError("no tracker run is active: start one (start_run) before logging to it")
        for tracker in self.trackers:
            try:
                action(tracker)
            except TrackerError:
                raise
            except Exception as exc:  # a tracker's own error, named with the tracker
                raise TrackerError(f"the {tracker.name} tracker failed: {type(exc).__name__}: {exc}") from exc

    def start_run(self, name: str, config: Mapping[str, Any], tags: Mapping[str, Any] | None = None) -> None:
        """Start a run named ``self.name or name`` with the flattened ``config`` as parameters."""
        if self.active:
            raise TrackerError("a tracker run is still active: end it (end_run) before starting another")
        params = flat_params(config)
        run_name = self.name or name
        for i, tracker in enumerate(self.trackers):
            try:
                tracker.start(run_name, params, group=self.group)
            except Exception as exc:  # the runs started before it are ended, not left running
                for started in self.trackers[:i]:
                    with contextlib.suppress(Exception):
                        started.finish("FAILED")
                if isinstance(exc, TrackerError):
                    raise
                raise TrackerError(f"the {tracker.name} tracker cannot start a run: {type(exc).__name__}: {exc}") \
                    from exc
        self.active = True
        all_tags = {**({"group": self.group} if self.group else {}), **(tags or {})}
        if all_tags:
            self.set_tags(all_tags)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        text = {k: v if isinstance(v, str) else json.dumps(v, default=str) for k, v in tags.items()}
        self._each(lambda t: t.set_tags(text))

    def log_metrics(self, values: Mapping[str, Any], step: int | None = None) -> None:
        numbers = numeric_values(values)
        self._each(lambda t: t.log_metrics(numbers, step))

    def log_artifact(self, path: str | os.PathLike, name: str | None = None) -> None:
        """Log a file or a directory (the run directory) to every tracker."""
        self._each(lambda t: t.log_artifact(Path(path), name))

    def log_json(self, name: str, data: Any) -> None:
        """Log ``data`` as the JSON file ``name``."""
        with tempfile.TemporaryDirectory(prefix="kgeval-tracking-") as tmp:
            path = Path(tmp) / name
            path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str), encoding="utf-8")
            self.log_artifact(path, name)

    def end_run(self, status: str = "FINISHED") -> None:
        """End the active run (nothing to do without one); ``status`` one of FINISHED, FAILED, KILLED."""
        if status not in STATUSES:
            raise InvalidInputError(f"status must be one of {STATUSES}, got {status!r}")
        if not self.active:
            return
        self.active = False
        errors = []
        for tracker in self.trackers:  # every tracker is finished even when one fails
            try:
                tracker.finish(status)
            except Exception as exc:
                errors.append(f"{tracker.name}: {exc}")
        if errors:
            raise TrackerError("finishing the tracker runs failed: " + "; ".join(errors))

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self.end_run("FINISHED" if kind is None else "KILLED" if issubclass(kind, KeyboardInterrupt) else "FAILED")


# ---------------------------------------------------------------------------- what a pipeline run logs
def status_of(exc: BaseException) -> str:
    """The run status of a run stopped by ``exc``: KILLED for Ctrl-C, else FAILED."""
    return "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"


@contextlib.contextmanager
def tracked_run(trackers: Trackers | None, owned: bool, name: str, config: Mapping[str, Any],
                tags: Mapping[str, Any] | None = None):
    """Start a run on ``trackers`` (nothing when ``None``) for the block; a failing block ends it as
    FAILED (KILLED for Ctrl-C), a finished one ends it only when ``owned``: the caller of a group it
    made itself adds the run directory and ends the run."""
    if trackers is None:
        yield None
        return
    trackers.start_run(name, config, tags)
    try:
        yield trackers
    except BaseException as exc:
        with contextlib.suppress(Exception):  # the block's error is the one to report
            trackers.end_run(status_of(exc))
        raise
    if owned:
        trackers.end_run()


def epoch_callback(trackers: Trackers, stopper, callback: Callable | None) -> Callable:
    """A training callback logging the epoch's loss and the stopper's evaluation of that epoch (if any),
    then calling ``callback`` (its return value stops training, as before)."""

    def logged(epoch: int, loss: float, model):
        values = {LOSS_KEY: loss}
        history = getattr(stopper, "history", None)
        if history and history[-1][0] == epoch:  # the stopper evaluated after this epoch
            values[VALIDATION_PREFIX + stopper.metric] = history[-1][1]
        trackers.log_metrics(values, step=epoch)
        return callback(epoch, loss, model) if callback is not None else None

    return logged


def log_results(trackers: Trackers, results, training=None) -> None:
    """The final values (``results.json``'s metrics), the protocol (tags and ``protocol.json``) and the
    training summary (epochs run, best epoch) of a run."""
    trackers.log_metrics(results.to_flat_dict(p_values=True))
    protocol = results.protocol.to_dict() if hasattr(results.protocol, "to_dict") else dict(results.protocol or {})
    trackers.set_tags({f"protocol.{k}": v for k, v in protocol.items() if isinstance(v, (str, int, float, bool))})
    trackers.log_json("protocol.json", protocol)
    if training is not None:
        summary = {"training.epochs_run": training.epochs_run, "training.stopped_early": int(training.stopped_early)}
        if training.best_epoch is not None:
            summary.update({"training.best_epoch": training.best_epoch, "training.best_metric": training.best_metric})
        trackers.log_metrics(summary)


#: what LOCATION means in ``NAME=LOCATION`` (:func:`parse_specs`): the option of each tracker it sets
LOCATION_OPTION = {"mlflow": "tracking_uri", "wandb": "directory", "tensorboard": "directory", "csv": "directory"}


def parse_specs(specs: Iterable[str]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """``(names, options)`` of command-line specs ``NAME`` or ``NAME=LOCATION`` (an MLflow tracking URI,
    a directory for the others); a name given twice is used once, with its last location.

    Examples
    --------
    >>> parse_specs(["csv", "mlflow=sqlite:///runs.db"])
    (['csv', 'mlflow'], {'mlflow': {'tracking_uri': 'sqlite:///runs.db'}})
    """
    from ..errors import unknown_name

    found: dict[str, dict[str, str]] = {}
    for spec in specs:
        name, sep, location = spec.partition("=")
        name = name.strip().lower()
        if name not in LOCATION_OPTION:
            raise unknown_name("tracker", name, LOCATION_OPTION)
        if sep and not location:
            raise InvalidInputError(f"tracker {spec!r}: nothing after '=' (NAME=LOCATION, e.g. csv=tracking/)")
        found.setdefault(name, {})
        if location:
            found[name] = {LOCATION_OPTION[name]: location}
    return list(found), {k: v for k, v in found.items() if v}
