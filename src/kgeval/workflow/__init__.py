"""The workflow layer: configuration, the train-and-evaluate pipeline, and run directories.

- :mod:`.config`: :class:`PipelineConfig`, the one configuration object;
- :mod:`.pipeline`: the stages of ``kgeval.pipeline``;
- :mod:`.evaluation`: the filtering protocol and re-evaluation of a model;
- :mod:`.runs`: saving and loading run directories (manifest, dataset checks);
- :mod:`.defaults`: per-model default settings;
- :mod:`.hpo`: hyper-parameter search over configuration paths (:func:`~.hpo.hpo_pipeline`),
  with :mod:`.search_space` (distributions, checked up front), :mod:`.study` (shared Optuna studies),
  :mod:`.hpo_checks` (what is refused before the first trial) and :mod:`.study_guard` (a study's identity,
  checked where its results are saved and where it is resumed).
"""

from __future__ import annotations

from .config import PipelineConfig, UnknownConfigKeyError
from .runs import CorruptRunError, DatasetMismatchError, OutputDirectoryError, Run, load_run

__all__ = ["PipelineConfig", "UnknownConfigKeyError", "CorruptRunError", "DatasetMismatchError",
           "OutputDirectoryError", "Run", "load_run"]
