"""PyKEEN models as kgeval scorers: the adapter lives beside the scorer protocol it implements
(:mod:`kgeval.evaluation.scorers`); these names are kept here for existing imports."""

from __future__ import annotations

from ..evaluation.scorers import PyKEENScorer, is_pykeen_model, is_triples_factory

__all__ = ["PyKEENScorer", "is_pykeen_model", "is_triples_factory"]
