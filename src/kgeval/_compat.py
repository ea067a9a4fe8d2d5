"""Dependency-free duck typing of objects from other libraries, for the core's error messages.

Nothing here imports the library it recognises; a check is a test of attributes only.
"""

from __future__ import annotations

__all__ = ["is_triples_factory"]


def is_triples_factory(obj) -> bool:
    """Whether ``obj`` looks like a PyKEEN (Core)TriplesFactory: it has ``mapped_triples``,
    ``num_entities`` and ``num_relations``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> is_triples_factory(SimpleNamespace(mapped_triples=None, num_entities=3, num_relations=1))
    True
    >>> is_triples_factory([[0, 0, 1]])
    False
    """
    return hasattr(obj, "mapped_triples") and hasattr(obj, "num_entities") and hasattr(obj, "num_relations")
