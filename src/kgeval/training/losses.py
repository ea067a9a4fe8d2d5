"""Training losses and regularisers, selected by name.

LCWA losses take ``scores (b, n)`` and multi-hot ``labels (b, n)``:

- ``"bce"``: binary cross-entropy with logits, mean over all ``b * n`` cells (PyKEEN's
  ``BCEWithLogitsLoss``); label smoothing ``eps`` makes the targets ``1 - eps`` (answers) and
  ``eps / (n - 1)`` (the other entities), as PyKEEN's ``apply_label_smoothing``;
- ``"softmax"`` (alias ``"crossentropy"``): cross-entropy between ``softmax(scores)`` and the
  row-normalised labels, mean over rows (PyKEEN's ``CrossEntropyLoss``); label smoothing mixes the
  normalised row with the uniform distribution, ``p (1 - eps) + eps / n`` (torch's ``cross_entropy``
  ``label_smoothing``, which PyKEEN uses).

Both take ``(scores, labels, label_smoothing=0.0)`` with hard multi-hot ``labels``
(:func:`lcwa_labels`); ``n`` is ``scores.shape[-1]``, the number of entities.

sLCWA losses take positive scores ``(b,)`` and negative scores ``(b, k)``:

- ``"margin"`` (alias ``"marginranking"``): ``mean(relu(margin - pos + neg))``, ``margin=1``;
- ``"softplus"``: ``mean(softplus(-pos))`` and ``mean(softplus(neg))`` averaged over all scores;
- ``"nssa"`` (alias ``"self_adversarial"``): self-adversarial negative sampling loss of
  RotatE (Sun et al., 2019), ``-log s(margin + pos) - sum_j w_j log s(-neg_j - margin)`` with
  ``w = softmax(temperature * neg)`` treated as constants, ``margin=9``, ``temperature=1``;
- ``"bce"``: positives labelled 1, negatives 0.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch
from torch.nn import functional as F

from ..errors import InvalidInputError, unknown_name

LCWA_LOSSES = {"bce", "softmax"}
SLCWA_LOSSES = {"margin", "softplus", "nssa", "bce"}
ALIASES = {"crossentropy": "softmax", "cross_entropy": "softmax", "marginranking": "margin",
           "margin_ranking": "margin", "self_adversarial": "nssa", "bcewithlogits": "bce"}
_DEFAULTS = {"margin": {"margin": 1.0}, "nssa": {"margin": 9.0, "temperature": 1.0}}
REGULARIZERS = ("l2", "n3")


def resolve_loss(name: str | None, loop: str, kwargs: dict | None = None) -> tuple[str, Callable]:
    """Return ``(canonical_name, fn)`` for a loss usable with ``loop``; defaults: LCWA -> bce, sLCWA -> nssa."""
    allowed = LCWA_LOSSES if loop == "lcwa" else SLCWA_LOSSES
    if name is None:
        name = "bce" if loop == "lcwa" else "nssa"
    key = ALIASES.get(str(name).lower(), str(name).lower())
    if key not in allowed:
        if key in LCWA_LOSSES | SLCWA_LOSSES:
            raise InvalidInputError(f"loss {name!r} cannot be used with the {loop} loop; use one of {sorted(allowed)}")
        raise unknown_name("loss", name, sorted(allowed | set(ALIASES)))
    params = dict(_DEFAULTS.get(key, {}))
    for k, v in (kwargs or {}).items():
        if k not in params:
            raise InvalidInputError(f"loss {key!r} has no option {k!r}; options: {sorted(params) or 'none'}")
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise InvalidInputError(f"loss option {k!r} must be a number, got {v!r}")
        params[k] = float(v)
    if loop == "lcwa":
        return key, (_bce_lcwa if key == "bce" else _softmax_lcwa)
    fn = {"margin": _margin, "softplus": _softplus, "nssa": _nssa, "bce": _bce_slcwa}[key]
    return key, (lambda pos, neg: fn(pos, neg, **params))


def lcwa_labels(scores: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Hard multi-hot targets shaped like ``scores``, 1 at ``(rows, cols)``; each LCWA loss smooths
    them its own way (as PyKEEN's loss of the same name)."""
    labels = torch.zeros_like(scores)
    labels[rows, cols] = 1.0
    return labels


def _bce_lcwa(scores, labels, label_smoothing=0.0):
    if label_smoothing:
        # PyKEEN's apply_label_smoothing: answers 1 - eps, the other n - 1 entities eps / (n - 1); with
        # a single entity every cell is an answer (max() only avoids 0 / 0)
        off = label_smoothing / max(1, scores.shape[-1] - 1)
        labels = labels * (1.0 - label_smoothing) + (1.0 - labels) * off
    return F.binary_cross_entropy_with_logits(scores, labels)


def _softmax_lcwa(scores, labels, label_smoothing=0.0):
    target = labels / labels.sum(-1, keepdim=True).clamp_min(1e-12)
    if label_smoothing:  # torch's cross_entropy(label_smoothing=eps) on the normalised row, as PyKEEN
        target = target * (1.0 - label_smoothing) + label_smoothing / scores.shape[-1]
    return -(target * F.log_softmax(scores, dim=-1)).sum(-1).mean()


def _margin(pos, neg, margin):
    return F.relu(margin - pos.unsqueeze(-1) + neg).mean()


def _softplus(pos, neg):
    return (F.softplus(-pos).sum() + F.softplus(neg).sum()) / (pos.numel() + neg.numel())


def _bce_slcwa(pos, neg):
    return (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
            + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="sum")) / (pos.numel() + neg.numel())


def _nssa(pos, neg, margin, temperature):
    weights = torch.softmax(temperature * neg, dim=-1).detach()
    neg_loss = -(weights * F.logsigmoid(-neg - margin)).sum(-1)
    pos_loss = -F.logsigmoid(margin + pos)
    return 0.5 * (pos_loss.mean() + neg_loss.mean())


def resolve_regularizer(name: str | None) -> str | None:
    if name is None:
        return None
    key = str(name).lower()
    if key not in REGULARIZERS:
        raise unknown_name("regularizer", name, REGULARIZERS)
    return key


def regularization(kind: str, factors: list[torch.Tensor]) -> torch.Tensor:
    """``sum_f sum |f|^2`` (l2) or ``sum_f sum |f|^3`` (n3), divided by the number of triples."""
    n = max(1, factors[0].shape[0])
    power = 2 if kind == "l2" else 3
    return sum(f.abs().pow(power).sum() for f in factors) / n
