"""Experiment trackers: log pipeline runs and search trials to MLflow, Weights & Biases, TensorBoard or CSV.

:func:`kgeval.pipeline` and :func:`kgeval.hpo_pipeline` take ``trackers=`` (names, :class:`Tracker`
adapters or a :class:`Trackers` group); the command line takes ``--tracker NAME[=LOCATION]``. Each
tracker's package is an optional extra imported only when that tracker is asked for
(``pip install -e ".[mlflow]"``, ``".[wandb]"``, ``".[tensorboard]"``; CSV needs none). What a run logs
is listed in :mod:`kgeval.tracking.group`.
"""

from __future__ import annotations

from .base import TRACKERS, MissingTrackerError, Tracker, TrackerError, flat_params, get_tracker
from .group import LOSS_KEY, VALIDATION_PREFIX, Trackers, parse_specs

__all__ = ["Tracker", "Trackers", "TrackerError", "MissingTrackerError", "get_tracker", "TRACKERS", "flat_params",
           "parse_specs", "LOSS_KEY", "VALIDATION_PREFIX"]
