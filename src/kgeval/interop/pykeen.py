"""PyKEEN models as kgeval scorers: the adapter lives beside the scorer protocol it implements
(:mod:`kgeval.evaluation.pykeen_scorer`); these names are kept here for existing imports."""

from __future__ import annotations

from ..evaluation.pykeen_scorer import PyKEENScorer, is_pykeen_model, is_triples_factory

__all__ = ["PyKEENScorer", "is_pykeen_model", "is_triples_factory"]
