"""Tensor helpers shared by the evaluator and the built-in models (peers that import neither each other)."""

from __future__ import annotations

import hashlib

import torch

__all__ = ["matmul_into", "state_digest"]


def matmul_into(q: torch.Tensor, cand_rows: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``q @ cand_rows.T``, written into ``out`` when it fits: same shape, dtype and device,
    contiguous, and no gradient to track (``out=`` does not support autograd). The evaluator
    offers ``out`` to reuse one score block instead of allocating a fresh result per call.

    Parameters
    ----------
    q : torch.Tensor
        ``(b, d)`` queries.
    cand_rows : torch.Tensor
        ``(n, d)`` candidate rows.
    out : torch.Tensor, optional
        A ``(b, n)`` block to write into; ignored when it does not fit.

    Returns
    -------
    torch.Tensor
        ``(b, n)`` scores, ``out`` itself when it was used.

    Examples
    --------
    >>> q, c = torch.ones(2, 3), torch.eye(3)
    >>> out = torch.empty(2, 3)
    >>> matmul_into(q, c, out) is out
    True
    """
    if (out is not None and out.dtype == q.dtype and out.device == q.device and out.is_contiguous()
            and tuple(out.shape) == (q.shape[0], cand_rows.shape[0])
            and not (torch.is_grad_enabled() and (q.requires_grad or cand_rows.requires_grad))):
        return torch.matmul(q, cand_rows.t(), out=out)
    return q @ cand_rows.t()


def state_digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 over the names, dtypes, shapes and bytes of a state dict's tensors (in name order).

    Parameters
    ----------
    state : dict of str to torch.Tensor
        A module's ``state_dict()`` (or any name -> tensor mapping).

    Returns
    -------
    str
        The hex digest; equal digests mean equal names, dtypes, shapes and bytes.

    Examples
    --------
    >>> state_digest({"w": torch.zeros(2)}) == state_digest({"w": torch.zeros(2)})
    True
    >>> state_digest({"w": torch.zeros(2)}) == state_digest({"w": torch.zeros(2, 1)})
    False
    """
    digest = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().reshape(-1)
        if t.stride(-1) != 1:  # contiguous() keeps a size-1 tensor's odd stride (a row of an (n, 3) array), view fails
            t = torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)
        digest.update(f"{name}|{t.dtype}|{tuple(state[name].shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy())  # the buffer itself: no copy of a (mapped) table
    return digest.hexdigest()
