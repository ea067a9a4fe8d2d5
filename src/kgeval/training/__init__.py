"""Training of kgeval models: :func:`train`, :class:`EarlyStopper`, :class:`TrainingResult`."""

from __future__ import annotations

from .loops import OPTIMIZERS, TrainingResult, train
from .losses import LCWA_LOSSES, REGULARIZERS, SLCWA_LOSSES
from .stopping import EarlyStopper

__all__ = ["train", "TrainingResult", "EarlyStopper", "OPTIMIZERS", "LCWA_LOSSES", "SLCWA_LOSSES", "REGULARIZERS"]
