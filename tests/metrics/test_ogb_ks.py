"""ogb_metrics validates its ks like hits@k does.

``ks=(2.5,)`` was reported as ``hits@2`` while counting ranks <= 2.5 (a task tied between ranks 2 and 3,
realistic rank 2.5, counted as a hit at 2: 1.0 instead of 0.667); ``ks=(0,)`` / ``(-1,)`` gave
``hits@0`` / ``hits@-1`` = 0.0; ``("10",)`` raised numpy's UFuncTypeError, ``ks=10`` a bare TypeError.
"""

from __future__ import annotations

import numpy as np
import pytest

from kgeval.errors import InvalidInputError
from kgeval.metrics import get, ogb_metrics
from kgeval.ranks import RankTable

TABLE = RankTable.from_ranks([1, 2, 2], [1, 3, 2], num_candidates=10)


@pytest.mark.parametrize("ks", [(2.5,), (3.0,), (0,), (-1,), (True,), ("10",), (None,), 2.5])
def test_bad_ks_are_named_errors(ks):
    with pytest.raises(InvalidInputError, match="ks"):
        ogb_metrics(TABLE, ks=ks)


def test_ks_values_are_the_realistic_hits_at_k():
    got = ogb_metrics(TABLE, ks=(1, np.int64(2), 3))
    ranks = TABLE.ranks("realistic")
    for k in (1, 2, 3):
        assert got[f"hits@{k}"] == get(f"hits@{k}")(ranks)
    assert ogb_metrics(TABLE, ks=2) == {"mrr": got["mrr"], "hits@2": got["hits@2"]}  # one k alone
