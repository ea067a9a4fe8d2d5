"""A small random graph with a DistMult scorer, shared by the evaluation API tests.
(A module with a unique name: the test modules import it directly.)"""

from __future__ import annotations

import numpy as np
import torch

from kgeval.models import DistMultScorer

#: entities and relations of :func:`small_graph`
E, R = 12, 3


def small_graph(seed: int = 0):
    """(scorer, train, test): integer-valued 4-d embeddings (so scores tie), 40 + 20 random triples."""
    rng = np.random.default_rng(seed)
    ent = torch.as_tensor(rng.integers(-2, 3, size=(E, 4)), dtype=torch.float32)
    rel = torch.as_tensor(rng.integers(-2, 3, size=(R, 4)), dtype=torch.float32)
    allt = rng.integers(0, [E, R, E], size=(60, 3))
    return DistMultScorer(ent, rel), allt[:40], allt[40:]


def table_graph(seed: int, e: int = 17, r: int = 3):
    """(score table ``(e, r, e)`` of integers 0..3, train, test): exact ties everywhere; the test triples repeat
    three of their own and two training triples (duplicates and overlap must be harmless)."""
    rng = np.random.default_rng(seed)
    table = torch.as_tensor(rng.integers(0, 4, size=(e, r, e)), dtype=torch.float32)
    allt = rng.integers(0, [e, r, e], size=(160, 3))
    train, test = allt[:120], allt[120:]
    return table, train, np.concatenate([test, test[:3], train[:2]])
