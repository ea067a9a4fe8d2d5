"""Knowledge graph embedding models that are kgeval scorers.

``get_model(name, num_entities, num_relations, *, dim=..., inverse_relations=False, **kwargs)``
builds one of :func:`model_names`; every model is a ``torch.nn.Module`` with
``score_tails`` / ``score_heads`` / ``score_triples`` (see :mod:`kgeval.models.base`),
``save(path)`` and :func:`load_model` to read it back safely.
"""

from __future__ import annotations

import os

import torch

from ..errors import InvalidInputError
from .base import Model, state_digest
from .complex import ComplEx
from .distmult import DistMult
from .embeddings import from_embeddings, shard_embeddings
from .pairre import PairRE
from .plain import DistMultScorer
from .baselines import Baseline, MarginalBaseline, PopularityBaseline, RuleBaseline
from .registry import BASELINES, MODELS, baseline_names, get_model, model_names
from .rotate import RotatE
from .shard import EntityShard
from .transe import TransE
from .tucker import TuckER

__all__ = ["Model", "TransE", "DistMult", "ComplEx", "RotatE", "TuckER", "PairRE", "MODELS",
           "get_model", "model_names", "load_model", "from_embeddings", "EntityShard",
           "shard_embeddings", "DistMultScorer", "Baseline", "RuleBaseline", "MarginalBaseline",
           "PopularityBaseline", "BASELINES", "baseline_names"]


def load_model(path, *, shard: tuple[int, int] | None = None) -> Model:
    """Read a file written by :meth:`Model.save`.

    The model is returned in eval mode (no dropout, batch norms on their running statistics).
    Uses ``torch.load(weights_only=True)``, so a file carrying pickled code is refused
    rather than executed; any unreadable or foreign file raises ``InvalidInputError``
    naming the file.

    ``shard=(rank, world)``: only that rank's entity shard (:meth:`Model.shard`, for
    ``distributed="entities"``): the file is memory-mapped, read once for its checksum, and only the
    local entity rows are copied into memory (the whole model is never built).
    """
    path = os.fspath(path)
    try:
        blob = _torch_load(path, mmap=shard is not None)
    except FileNotFoundError:
        raise InvalidInputError(f"model file {path!r} does not exist") from None
    except Exception as exc:  # UnpicklingError, RuntimeError (zip), EOFError, ...
        raise InvalidInputError(
            f"{path!r} is not a readable kgeval model file ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
        ) from None
    if not isinstance(blob, dict) or blob.get("format") != "kgeval-model" or not isinstance(blob.get("config"), dict) \
            or not isinstance(blob.get("state_dict"), dict):
        raise InvalidInputError(f"{path!r} is not a kgeval model file (expected a dict written by Model.save)")
    if "sha256" in blob and blob["sha256"] != state_digest(blob["state_dict"]):
        raise InvalidInputError(f"{path!r}: corrupt kgeval model file (the weights do not match their checksum)")
    cfg = blob["config"]
    lo = hi = None
    if shard is not None:  # a bad rank / world (TooManyRanksError) is named as such, not as a corrupt file
        from .shard import _shard_range

        lo, hi = _shard_range(cfg.get("num_entities"), *shard)
    try:
        state = blob["state_dict"]
        num_entities = cfg["num_entities"]
        if shard is not None:
            state = {k: (v[lo:hi] if k == "entity.weight" else v) for k, v in state.items()}
            num_entities = hi - lo
        model = get_model(cfg["name"], num_entities, cfg["num_relations"], dim=cfg["dim"],
                          inverse_relations=cfg.get("inverse_relations", False), **dict(cfg.get("kwargs", {})))
        # in the saved precision: load_state_dict copies into the float32 model built above, so a
        # float64 model came back float32 and ranked its near-ties (rows 1e-9 apart) as ties
        dtypes = {v.dtype for v in state.values() if isinstance(v, torch.Tensor) and v.is_floating_point()}
        if len(dtypes) == 1 and next(iter(dtypes)) != torch.float32:
            model = model.to(next(iter(dtypes)))
        model.load_state_dict(state)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{path!r}: invalid model configuration: {exc}") from None
    except (KeyError, TypeError, RuntimeError) as exc:
        raise InvalidInputError(f"{path!r}: corrupt kgeval model file ({type(exc).__name__}: {exc})") from None
    labels = blob.get("labels") if isinstance(blob.get("labels"), dict) else {}
    if shard is not None:
        from .shard import EntityShard

        model = EntityShard(model, entity_offset=lo, num_entities=cfg["num_entities"])
    #: label of each entity / relation id in the training data (None: not recorded)
    model.entity_labels = _labels(path, labels.get("entities"), model.num_entities, "entity")
    model.relation_labels = _labels(path, labels.get("relations"), model.num_relations, "relation")
    # in eval mode, as from_embeddings: a module is built in training mode, so TuckER's dropout drew new scores
    # on every kgeval.evaluate(load_model(path), ...) and its batch norms took the evaluation batches into their
    # running statistics, changing the model (train() switches to training mode itself)
    return model.eval()


def _torch_load(path: str, mmap: bool):
    """``torch.load`` of a model file (memory-mapped when asked and the file's format allows it)."""
    if mmap:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except FileNotFoundError:
            raise
        except Exception:  # noqa: BLE001 - e.g. the legacy (non-zip) format: read it normally below
            pass
    return torch.load(path, map_location="cpu", weights_only=True)


def _labels(path: str, labels, size: int, kind: str) -> list[str] | None:
    if labels is None:
        return None
    if not isinstance(labels, list) or len(labels) != size or not all(isinstance(x, str) for x in labels):
        raise InvalidInputError(f"{path!r}: corrupt kgeval model file (the {kind} labels do not match the model)")
    return labels


class MovedError(ImportError):
    """A name that moved out of :mod:`kgeval.models`; the message names its new home."""


#: names that moved out of this package (models import nothing from ``kgeval.interop``)
_MOVED = {"from_pykeen": "kgeval.interop.from_pykeen"}


def __getattr__(name: str):
    if name in _MOVED:
        raise MovedError(f"kgeval.models.{name} moved to {_MOVED[name]}: "
                         f"from {_MOVED[name].rpartition('.')[0]} import {name}")
    raise AttributeError(f"module 'kgeval.models' has no attribute {name!r}")
