"""The registry of built-in models: :data:`MODELS`, :func:`model_names`, :func:`get_model`.

Apart from ``models/__init__``, so a module of this package (``embeddings``) builds a model by name
without importing the package it belongs to.
"""

from __future__ import annotations

import inspect

import torch

from ..errors import InvalidInputError, unknown_name
from .base import Model
from .baselines import BASELINES
from .complex import ComplEx
from .distmult import DistMult
from .pairre import PairRE
from .rotate import RotatE
from .transe import TransE
from .tucker import TuckER

__all__ = ["MODELS", "BASELINES", "model_names", "baseline_names", "get_model"]

MODELS: dict[str, type[Model]] = {cls.name: cls for cls in (TransE, DistMult, ComplEx, RotatE, TuckER, PairRE)}


def model_names() -> list[str]:
    """Registered (trainable) model names (lower case)."""
    return sorted(MODELS)


def baseline_names() -> list[str]:
    """The non-trained baselines (:mod:`kgeval.models.baselines`), built by :func:`get_model` too (then fitted)."""
    return sorted(BASELINES)


def get_model(name: str, num_entities: int, num_relations: int, *, dim: int | None = None,
              inverse_relations: bool = False, seed: int | None = None, **kwargs) -> Model:
    """Build a model by (case-insensitive) name.

    ``dim`` defaults to the model's own default; ``seed`` makes the initialisation
    reproducible without touching the global RNG state; remaining keywords go to the model
    class (e.g. ``p=1`` for TransE/PairRE, dropouts for TuckER). Unknown keywords raise
    :class:`~kgeval.errors.InvalidInputError`.

    Examples
    --------
    >>> from kgeval.models import get_model
    >>> model = get_model("complex", num_entities=14, num_relations=55, dim=8, seed=0)
    >>> model.num_entities
    14
    """
    key = str(name).lower()
    known = {**MODELS, **BASELINES}
    if key not in known:
        raise unknown_name("model", name, known)
    cls = known[key]
    params = inspect.signature(cls.__init__).parameters
    bad = sorted(k for k in kwargs if k not in params or k in ("self", "num_entities", "num_relations"))
    if bad:
        # dim, seed and inverse_relations are get_model's own keywords; the rest are the class's
        allowed = sorted({"dim", "seed", "inverse_relations"}
                         | {k for k in params if k not in ("self", "num_entities", "num_relations")})
        raise InvalidInputError(f"model {key!r} got unknown option(s) {bad}; allowed: {', '.join(allowed)}")
    if dim is not None:
        kwargs["dim"] = dim
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        try:
            return cls(num_entities, num_relations, inverse_relations=inverse_relations, **kwargs)
        except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            if not isinstance(exc, MemoryError) and "alloc" not in str(exc).lower():
                raise
            raise InvalidInputError(
                f"model {name!r} with dim={kwargs.get('dim')} for {num_entities} entities and {num_relations} "
                f"relations does not fit in memory ({str(exc).splitlines()[0][:200]})"
            ) from None
