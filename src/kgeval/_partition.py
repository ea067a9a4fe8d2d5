"""The entity partition of a distributed evaluation: rank ``r`` of ``world`` holds the contiguous ids
``[n * r // world, n * (r + 1) // world)``.

Used by the evaluator (to check every rank's shard) and by the built-in models (to cut a shard), which
are peers and import neither each other.
"""

from __future__ import annotations

import numpy as np

from .errors import InvalidInputError, KGEvalError

__all__ = ["DistributedError", "TooManyRanksError", "shard_range"]


class DistributedError(KGEvalError):
    """Base class of the errors of a distributed evaluation."""


class TooManyRanksError(DistributedError, InvalidInputError):
    """``distributed="entities"`` with more ranks than entities (a rank would hold none)."""


def shard_range(n: int, rank: int, world: int) -> tuple[int, int]:
    """``(lo, hi)``: the entity ids ``[n * rank // world, n * (rank + 1) // world)`` of rank ``rank``.

    Parameters
    ----------
    n : int
        The number of entities.
    rank, world : int
        This rank and the number of ranks, ``0 <= rank < world <= n``.

    Returns
    -------
    tuple of int
        ``(lo, hi)``; the ranges of ranks ``0 .. world - 1`` tile ``[0, n)`` and differ in size by at most 1.

    Raises
    ------
    TooManyRanksError
        ``world > n``: a rank would hold no entity.

    Examples
    --------
    >>> [shard_range(10, r, 3) for r in range(3)]
    [(0, 3), (3, 6), (6, 10)]
    """
    for name, v in (("num_entities", n), ("rank", rank), ("world", world)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InvalidInputError(f"{name} must be an integer, got {v!r}")
    n, rank, world = int(n), int(rank), int(world)
    if world < 1 or not 0 <= rank < world:
        raise InvalidInputError(f"rank must lie in [0, world) with world >= 1, got rank={rank}, world={world}")
    if world > n:
        raise TooManyRanksError(f"world size {world} is larger than the number of entities {n}: with "
                                f"distributed='entities' every rank must hold at least one entity")
    return n * rank // world, n * (rank + 1) // world
