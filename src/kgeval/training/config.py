"""The options of :func:`kgeval.training.train`, declared and validated once: :class:`TrainingConfig`."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .._validation import check_positive_int, check_positive_number, check_seed
from ..errors import InvalidInputError, unknown_name
from .losses import resolve_loss, resolve_regularizer

#: the largest float32 (the parameters' dtype): a larger learning rate overflows inside torch
_FLOAT32_MAX = 3.4028234663852886e38
#: the largest learning rate each optimiser's step can use: Adam's first step is lr / (1 - beta1) = 10 lr
#: (torch's default beta1 = 0.9), which must be a float32 (else a raw "value cannot be converted to type
#: float without overflow" RuntimeError from the first optimiser step)
MAX_LR = {"adam": _FLOAT32_MAX * (1 - 0.9), "adagrad": _FLOAT32_MAX}

OPTIMIZERS = {"adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad}
DEFAULT_LR = {"adam": 1e-3, "adagrad": 1e-2}
LOOPS = ("lcwa", "slcwa")


def _check_number(name: str, value, *, low: float, high: float | None = None) -> float:
    """A real number (``bool`` refused) with ``low <= value`` and ``value < high`` when ``high`` is given."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not low <= float(value) or (high is not None and not float(value) < high):
        bound = f"in [{low:g}, {high:g})" if high is not None else f"a number >= {low:g}"
        raise InvalidInputError(f"{name} must be {bound}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class TrainingConfig:
    """How :func:`~kgeval.training.train` trains; every field is checked when the object is made.

    Build one directly, from a dict (:meth:`from_dict`) or from another with changes
    (:meth:`replace`); ``to_dict()`` is its JSON-ready form.
    """

    #: ``"lcwa"`` (1-to-all scores against multi-hot labels) or ``"slcwa"`` (negative sampling)
    loop: str = "lcwa"
    #: loss name (:mod:`kgeval.training.losses`); ``None``: ``bce`` for LCWA, ``nssa`` for sLCWA
    loss: str | None = None
    #: loss options, e.g. ``{"margin": 6.0, "temperature": 0.5}``
    loss_kwargs: Mapping[str, float] | None = None
    #: ``"adam"`` or ``"adagrad"``
    optimizer: str = "adam"
    #: learning rate; ``None``: 1e-3 for Adam, 1e-2 for Adagrad (see :attr:`learning_rate`)
    lr: float | None = None
    epochs: int = 100
    #: training triples (sLCWA) or queries (LCWA) per optimiser step
    batch_size: int = 256
    #: sLCWA corruptions per training triple (LCWA refuses any value but the default 1)
    num_negatives: int = 1
    #: LCWA label smoothing ``eps`` (refused with sLCWA), as PyKEEN's loss of the same name: ``bce`` targets ``1 - eps`` and
    #: ``eps / (num_entities - 1)``; ``softmax`` mixes the normalised labels with ``eps / num_entities``
    label_smoothing: float = 0.0
    #: ``"l2"`` or ``"n3"`` on the batch triples' embeddings (:meth:`Model.factors`), or ``None``
    regularizer: str | None = None
    regularizer_weight: float = 0.01
    #: makes the run reproducible on CPU without touching the caller's global RNG; ``None``: global RNG
    seed: int | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalised values are written once, here
        loop = str(self.loop).lower()
        if loop not in LOOPS:
            raise unknown_name("training loop", self.loop, LOOPS)
        put(self, "loop", loop)
        loss_kwargs = None if self.loss_kwargs is None else dict(self.loss_kwargs)
        if loss_kwargs is not None and not all(isinstance(k, str) for k in loss_kwargs):
            raise InvalidInputError(f"loss_kwargs must map option names to numbers, got {self.loss_kwargs!r}")
        resolve_loss(self.loss, loop, loss_kwargs)  # checks the name, the loop and the options
        put(self, "loss_kwargs", loss_kwargs)
        optimizer = str(self.optimizer).lower()
        if optimizer not in OPTIMIZERS:
            raise unknown_name("optimizer", self.optimizer, OPTIMIZERS)
        put(self, "optimizer", optimizer)
        put(self, "regularizer", resolve_regularizer(self.regularizer))
        put(self, "lr", check_positive_number("lr", self.lr, allow_none=True))
        if self.lr is not None and self.lr > MAX_LR[optimizer]:  # torch's optimisers fail with a raw overflow
            raise InvalidInputError(f"lr must be at most {MAX_LR[optimizer]:.3g} for {optimizer} (its step must be a "
                                    f"float32), got {self.lr!r}")
        for name in ("epochs", "batch_size", "num_negatives"):
            # 2**31 - 1: beyond any real run, and larger counts overflow inside tqdm/torch as raw errors
            put(self, name, check_positive_int(name, getattr(self, name), maximum=2**31 - 1))
        if loop == "lcwa" and self.num_negatives != 1:  # LCWA scores every entity: it was silently ignored
            raise InvalidInputError(f"num_negatives ({self.num_negatives!r}) applies to the slcwa loop only; the lcwa "
                                    "loop scores every entity and draws no negatives (use loop='slcwa' or leave "
                                    "num_negatives at 1)")
        put(self, "label_smoothing", _check_number("label_smoothing", self.label_smoothing, low=0.0, high=1.0))
        if loop == "slcwa" and self.label_smoothing:  # the sLCWA losses take no labels: it was silently ignored
            raise InvalidInputError(f"label_smoothing ({self.label_smoothing!r}) applies to the lcwa loop only; the slcwa "
                                    "losses have no labels to smooth (use loop='lcwa' or leave label_smoothing at 0)")
        put(self, "regularizer_weight", _check_number("regularizer_weight", self.regularizer_weight, low=0.0,
                                                      high=float("inf")))
        put(self, "seed", check_seed("seed", self.seed, allow_none=True))

    @property
    def learning_rate(self) -> float:
        """``lr``, or the optimiser's default when ``lr`` is ``None``."""
        return DEFAULT_LR[self.optimizer] if self.lr is None else self.lr

    def loss_function(self):
        """The loss as a callable: ``(scores, labels, label_smoothing=0.0)`` for LCWA, ``(positive, negative)`` for sLCWA."""
        return resolve_loss(self.loss, self.loop, self.loss_kwargs)[1]

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def replace(self, **changes) -> TrainingConfig:
        """A copy with ``changes`` applied (and validated); an unknown name is refused with a suggestion."""
        unknown = [k for k in changes if k not in self.option_names()]
        if unknown:
            raise unknown_name("training option", unknown[0], self.option_names())
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.option_names()}
        out["loss_kwargs"] = None if self.loss_kwargs is None else dict(self.loss_kwargs)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingConfig:
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"a training configuration must be a mapping, got {type(data).__name__}")
        return cls().replace(**dict(data))
