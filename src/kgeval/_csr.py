"""Compressed-sparse-row helpers shared by the training loop and the filter index.

A CSR list stores the items of row ``i`` at ``items[starts[i] : starts[i] + counts[i]]``.
:func:`csr_pairs` expands a batch of such ranges into flat ``(row, position)`` pairs, so the
caller can gather ``items[position]``. Its output has ``sum(counts)`` entries: the work is
proportional to the number of items of the batch, never to ``rows x all items``.
"""

from __future__ import annotations

import torch

__all__ = ["csr_pairs"]


def csr_pairs(starts: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, positions)``: for every row ``i`` and ``j < counts[i]``, the pair ``(i, starts[i] + j)``.

    Pairs are ordered by row, then by ``j``. ``starts`` and ``counts`` are 1-d int64 tensors
    of the same length on the same device; the result lives on that device.
    """
    total = int(counts.sum())
    device = counts.device
    rows = torch.repeat_interleave(torch.arange(counts.numel(), device=device), counts, output_size=total)
    # position inside each row's range: flat index minus the row's offset in the flat list
    offsets = torch.cumsum(counts, 0) - counts
    within = torch.arange(total, device=device) - offsets[rows]
    return rows, starts[rows] + within
