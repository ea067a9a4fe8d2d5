"""Id triples: validation of integer ``(n, 3)`` arrays of (head, relation, tail) ids, and restriction masks.

Shared by the evaluator, the training loops and anything else that takes id triples, so a
user mistake gets the same clear message everywhere.
"""

from __future__ import annotations

import numpy as np

from ._compat import is_triples_factory
from ._validation import to_numpy
from .errors import InvalidInputError


def as_triples(name: str, value, *, allow_empty: bool = False) -> np.ndarray:
    """``value`` (array, list or tensor) as an int64 ``(n, 3)`` array, or a clear error.

    Float ids are refused, never truncated; unsigned ids beyond int64 are refused, never wrapped.
    """
    if is_triples_factory(value):
        # a PyKEEN TriplesFactory: np.asarray made an object array of it ("got dtype object")
        raise InvalidInputError(
            f"{name} is a PyKEEN TriplesFactory: pass its id triples, factory.mapped_triples, after checking that "
            "the model uses the factory's entity_to_id / relation_to_id (a live PyKEEN model given to "
            "kgeval.evaluate takes the factory itself)")
    arr = to_numpy(name, value)
    if arr.size == 0:  # empty before dtype: ``[]`` is float64 to numpy, but the problem is the emptiness
        if allow_empty:
            return np.zeros((0, 3), dtype=np.int64)
        raise InvalidInputError(f"{name} is empty: at least one (head, relation, tail) triple is needed")
    if arr.dtype.kind not in "iu":
        raise InvalidInputError(f"{name} must hold integer ids, got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise InvalidInputError(f"{name} must have shape (n, 3) of (head, relation, tail) ids, got shape {arr.shape}")
    if arr.dtype.kind == "u" and int(arr.max()) > np.iinfo(np.int64).max:
        raise InvalidInputError(f"{name}: id {int(arr.max())} is too large")
    return arr.astype(np.int64, copy=False)


def check_ids(name: str, arr: np.ndarray, num_entities: int, num_relations: int | None) -> None:
    """Raise naming the first triple whose head, relation or tail id is out of range."""
    if arr.ndim == 2 and arr.shape[1] == 3 and arr.size and num_relations is not None:
        # three reductions, two over the whole contiguous array (fewer passes over memory than two
        # strided ones per column); a relation id legitimately >= num_entities (more relations than
        # entities) takes the per-column path below
        if int(arr.min()) >= 0 and int(arr.max()) < num_entities and int(arr[:, 1].max()) < num_relations:
            return
    for col, what, limit in ((0, "head", num_entities), (2, "tail", num_entities), (1, "relation", num_relations)):
        ids = arr[:, col]
        # two reductions per column (cheaper than building the masks on every call); the mask only
        # to name the first bad triple
        if ids.size == 0 or (int(ids.min()) >= 0 and (limit is None or int(ids.max()) < limit)):
            continue
        bad = ids < 0 if limit is None else (ids < 0) | (ids >= limit)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            rng = f"[0, {limit})" if limit is not None else ">= 0"
            raise InvalidInputError(
                f"{name}: {what} id {int(ids[i])} of triple {i} {tuple(int(x) for x in arr[i])} is out of range {rng}"
            )


def restrict_mask(triples: np.ndarray, relations, entities) -> np.ndarray:
    """Which triples survive a restriction: relation allowed, head and tail allowed (``None`` = all)."""
    keep = np.ones(len(triples), dtype=bool)
    if relations is not None:
        keep &= np.isin(triples[:, 1], relations)
    if entities is not None:
        keep &= np.isin(triples[:, 0], entities) & np.isin(triples[:, 2], entities)
    return keep
