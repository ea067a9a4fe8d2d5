"""Negative sampling for the sampled evaluation protocol.

Each task gets ``k`` negatives drawn uniformly *without replacement* from the candidate universe
(all entities, or the entity restriction) minus the excluded entities: every known true answer
of the task's query in the filtered setting, only the task's own answer otherwise.

Drawing without materialising the allowed set: with the excluded universe positions sorted as
``x_0 < x_1 < ...`` and ``y_j = x_j - j`` (the number of allowed positions before ``x_j``), the
``i``-th allowed position is ``i + #{j : y_j <= i}`` (``searchsorted(y, i, side='right')``).
``numpy.random.Generator.choice(n_available, k, replace=False)`` picks the ``i``'s.

The generator is ``numpy.random.default_rng([seed, side])`` and tasks are drawn in task order,
so the negatives do not depend on the batch size or on which other sides are evaluated.
"""

from __future__ import annotations

import numpy as np

from .filter_index import FilterIndex


def sample_negatives(
    keys: np.ndarray,
    answers: np.ndarray,
    *,
    num_negatives: int,
    seed: int,
    side: int,
    universe: np.ndarray,
    index: FilterIndex | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Negatives for each task.

    ``keys``/``answers``: query key and true answer of each task; ``universe``: sorted allowed
    entity ids; ``index``: known answers per key (``None`` = unfiltered: exclude only the answer).
    Returns ``(negatives, counts)``: ``negatives`` is ``(n, min(num_negatives, #universe))`` int64
    padded with -1 when fewer entities are available, ``counts[i]`` the number drawn.
    """
    rng = np.random.default_rng([int(seed), int(side)])
    n = keys.shape[0]
    u = universe.shape[0]
    # no task can have more negatives than candidates: cap before allocating (n, k), so a huge
    # num_negatives costs nothing extra (the draws are the same: each task draws min(k, available))
    k = max(1, min(int(num_negatives), u))
    out = np.full((n, k), -1, dtype=np.int64)
    counts = np.zeros(n, dtype=np.int64)
    cache: dict[int, np.ndarray] = {}
    for i in range(n):
        key = int(keys[i])
        if index is not None:
            y = cache.get(key)
            if y is None:
                excl = index.answers_of(key)
                pos = np.searchsorted(universe, excl)
                ok = pos < u
                ok[ok] = universe[pos[ok]] == excl[ok]
                x = pos[ok]  # sorted: answers and universe are sorted
                y = x - np.arange(x.shape[0])
                cache[key] = y
        else:
            p = int(np.searchsorted(universe, answers[i]))
            x = np.array([p] if p < u and universe[p] == answers[i] else [], dtype=np.int64)
            y = x - np.arange(x.shape[0])
        available = u - y.shape[0]
        m = min(k, available)
        if m <= 0:
            continue
        idx = rng.choice(available, size=m, replace=False)
        out[i, :m] = universe[idx + np.searchsorted(y, idx, side="right")]
        counts[i] = m
    return out, counts
