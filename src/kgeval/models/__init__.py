"""Knowledge graph embedding models that are kgeval scorers.

``get_model(name, num_entities, num_relations, *, dim=..., inverse_relations=False, **kwargs)``
builds one of :func:`model_names`; every model is a ``torch.nn.Module`` with
``score_tails`` / ``score_heads`` / ``score_triples`` (see :mod:`kgeval.models.base`),
``save(path)`` and :func:`load_model` to read it back safely.
"""

from __future__ import annotations

import inspect
import os

import torch

from ..errors import InvalidInputError, unknown_name
from .base import Model, state_digest
from .complex import ComplEx
from .distmult import DistMult
from .embeddings import from_embeddings
from .pairre import PairRE
from .plain import DistMultScorer
from .rotate import RotatE
from .shard import EntityShard, shard_embeddings
from .transe import TransE
from .tucker import TuckER

MODELS: dict[str, type[Model]] = {cls.name: cls for cls in (TransE, DistMult, ComplEx, RotatE, TuckER, PairRE)}

__all__ = ["Model", "TransE", "DistMult", "ComplEx", "RotatE", "TuckER", "PairRE", "MODELS",
           "get_model", "model_names", "load_model", "from_pykeen", "from_embeddings", "EntityShard",
           "shard_embeddings", "DistMultScorer"]


def model_names() -> list[str]:
    """Registered model names (lower case)."""
    return sorted(MODELS)


def get_model(name: str, num_entities: int, num_relations: int, *, dim: int | None = None,
              inverse_relations: bool = False, seed: int | None = None, **kwargs) -> Model:
    """Build a model by (case-insensitive) name.

    ``dim`` defaults to the model's own default; ``seed`` makes the initialisation
    reproducible without touching the global RNG state; remaining keywords go to the model
    class (e.g. ``p=1`` for TransE/PairRE, dropouts for TuckER). Unknown keywords raise
    :class:`~kgeval.errors.InvalidInputError`.
    """
    key = str(name).lower()
    if key not in MODELS:
        raise unknown_name("model", name, MODELS)
    cls = MODELS[key]
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


def from_pykeen(model) -> Model:
    """A trained PyKEEN model as a kgeval model with the same scores (see :mod:`kgeval.interop.pykeen_convert`)."""
    from ..interop.pykeen_convert import from_pykeen as convert

    return convert(model)
