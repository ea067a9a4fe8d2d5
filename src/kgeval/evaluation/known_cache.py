"""Removed: evaluations no longer keep a process-wide cache of what they derive from their known
triples. Pass one :class:`~kgeval.evaluation.KnownTriples` as ``filter_triples`` to every evaluation
of a loop instead (it memoises the filter indexes and the distinct count). This name stays importable
for old imports only."""

from .inputs import KnownTriples

__all__ = ["KnownTriples"]
