"""Training of kgeval models: :func:`train` with a :class:`TrainingConfig`, :class:`EarlyStopper`, :class:`TrainingResult`."""

from __future__ import annotations

from .config import OPTIMIZERS, TrainingConfig
from .loops import TrainingResult, train
from .losses import LCWA_LOSSES, REGULARIZERS, SLCWA_LOSSES
from .stopping import EarlyStopper

__all__ = ["train", "TrainingConfig", "TrainingResult", "EarlyStopper", "OPTIMIZERS", "LCWA_LOSSES", "SLCWA_LOSSES",
           "REGULARIZERS"]
