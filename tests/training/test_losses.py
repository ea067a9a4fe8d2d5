"""Loss functions and regularisers against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.training.losses import lcwa_labels, regularization, resolve_loss, resolve_regularizer


def test_lcwa_labels():
    labels = lcwa_labels(torch.zeros(2, 4), torch.tensor([0, 0, 1]), torch.tensor([1, 3, 2]))
    assert labels.tolist() == [[0, 1, 0, 1], [0, 0, 1, 0]]


def test_lcwa_label_smoothing_by_hand():
    """bce: answers 1 - eps, others eps / (n - 1); softmax: normalised row * (1 - eps) + eps / n."""
    scores = torch.tensor([[2.0, -1.0, 0.5, 0.0], [0.3, 1.0, -2.0, 0.7]], dtype=torch.float64)
    labels = lcwa_labels(scores, torch.tensor([0, 0, 1]), torch.tensor([1, 3, 2]))
    eps, n = 0.2, 4
    _, bce = resolve_loss("bce", "lcwa")
    target = torch.where(labels > 0, torch.full_like(labels, 1 - eps), torch.full_like(labels, eps / (n - 1)))
    sig = torch.sigmoid(scores)
    expected = -(target * sig.log() + (1 - target) * (1 - sig).log()).mean()
    assert bce(scores, labels, eps).item() == pytest.approx(expected.item(), rel=1e-12)
    _, softmax = resolve_loss("softmax", "lcwa")
    target = labels / labels.sum(-1, keepdim=True) * (1 - eps) + eps / n  # row 0: 0.45 at each answer
    assert target[0, 1].item() == pytest.approx(0.45)
    expected = -(target * torch.log_softmax(scores, -1)).sum(-1).mean()
    assert softmax(scores, labels, eps).item() == pytest.approx(expected.item(), rel=1e-12)
    # a single entity: every cell an answer, no 0 / 0
    one = bce(torch.tensor([[0.0]]), torch.tensor([[1.0]]), eps).item()
    assert one == pytest.approx(-(0.8 * math.log(0.5) + 0.2 * math.log(0.5)))


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_lcwa_losses_match_pykeen(eps):
    pykeen_losses = pytest.importorskip("pykeen.losses")
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    labels = lcwa_labels(scores, torch.tensor([0, 0, 1, 2, 2, 2]), torch.tensor([1, 3, 2, 0, 1, 4]))
    for name, ref in (("bce", pykeen_losses.BCEWithLogitsLoss()), ("softmax", pykeen_losses.CrossEntropyLoss())):
        expected = ref.process_lcwa_scores(scores, labels, label_smoothing=eps, num_entities=5).item()
        assert resolve_loss(name, "lcwa")[1](scores, labels, eps).item() == pytest.approx(expected, rel=1e-12), name


def test_lcwa_losses():
    scores = torch.tensor([[2.0, -1.0, 0.0]])
    labels = torch.tensor([[1.0, 0.0, 1.0]])
    _, bce = resolve_loss("bce", "lcwa")
    expected = (math.log1p(math.exp(-2)) + math.log1p(math.exp(-1)) + math.log(2)) / 3
    assert bce(scores, labels).item() == pytest.approx(expected, rel=1e-6)
    _, softmax = resolve_loss("crossentropy", "lcwa")
    logz = math.log(math.exp(2) + math.exp(-1) + 1)
    assert softmax(scores, labels).item() == pytest.approx(0.5 * (logz - 2) + 0.5 * logz, rel=1e-6)


def test_slcwa_losses():
    pos, neg = torch.tensor([1.0]), torch.tensor([[0.5, -3.0]])
    _, margin = resolve_loss("margin", "slcwa", {"margin": 1.0})
    assert margin(pos, neg).item() == pytest.approx((0.5 + 0.0) / 2)
    _, softplus = resolve_loss("softplus", "slcwa")
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731
    assert softplus(pos, neg).item() == pytest.approx((sp(-1) + sp(0.5) + sp(-3)) / 3, rel=1e-6)
    name, nssa = resolve_loss(None, "slcwa", {"margin": 2.0, "temperature": 1.0})
    assert name == "nssa"
    ls = lambda x: -math.log1p(math.exp(-x))  # noqa: E731  log sigmoid
    w = [math.exp(0.5) / (math.exp(0.5) + math.exp(-3)), math.exp(-3) / (math.exp(0.5) + math.exp(-3))]
    expected = 0.5 * (-ls(2 + 1) - (w[0] * ls(-0.5 - 2) + w[1] * ls(3 - 2)))
    assert nssa(pos, neg).item() == pytest.approx(expected, rel=1e-6)


def test_regularizers():
    f = [torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 0.0]])]
    assert regularization("l2", f).item() == pytest.approx(1 + 4 + 9)
    assert regularization("n3", f).item() == pytest.approx(1 + 8 + 27)
    assert resolve_regularizer("N3") == "n3" and resolve_regularizer(None) is None
    with pytest.raises(UnknownNameError):
        resolve_regularizer("l3")


def test_loss_loop_mismatch():
    with pytest.raises(InvalidInputError, match="lcwa"):
        resolve_loss("nssa", "lcwa")
    with pytest.raises(UnknownNameError, match="softplus"):
        resolve_loss("softplux", "slcwa")
