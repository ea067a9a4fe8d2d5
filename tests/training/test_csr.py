"""kgeval._csr.csr_pairs against a Python loop."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kgeval._csr import csr_pairs


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 4)), max_size=8))
def test_csr_pairs_matches_a_loop(ranges):
    starts = torch.tensor([s for s, _ in ranges], dtype=torch.long)
    counts = torch.tensor([c for _, c in ranges], dtype=torch.long)
    rows, positions = csr_pairs(starts, counts)
    expected = [(i, s + j) for i, (s, c) in enumerate(ranges) for j in range(c)]
    assert list(zip(rows.tolist(), positions.tolist())) == expected
