"""Build a kgeval model from plain embedding matrices trained anywhere.

:func:`from_embeddings` ``(interaction, entity, relation)`` copies the matrices into one of
kgeval's own models, whose layouts are (``d`` = complex dimension):

- ``transe`` / ``distmult``: entity ``(E, d)``, relation ``(R, d)``;
- ``complex``: entity ``(E, 2d)``, relation ``(R, 2d)``, each row ``[re | im]``
  (LibKGE's and kgeval's layout; complex-dtype arrays are converted to it);
- ``rotate``: entity ``(E, 2d)`` as ``[re | im]``, relation ``(R, d)`` phases in radians
  (a complex-dtype relation array is converted with ``angle``; its moduli must be 1).

``inverse_relations=True`` means the relation matrix holds ``2R`` rows, row ``r + R`` being
the inverse of ``r`` (head queries are answered as tail queries of the inverse).
:func:`load_array` reads ``.npy`` (memory-mapped, so a large file is read once, straight into
the model), ``.npz`` (the only array, or the one named by ``key``) and ``.pt`` files
(``weights_only`` loading: a tensor, or a dict holding exactly one tensor / the one named by
``key``).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from ..errors import InvalidInputError, unknown_name

INTERACTIONS = ("complex", "distmult", "rotate", "transe")


def from_embeddings(interaction: str, entity, relation, *, inverse_relations: bool = False,
                    num_entities: int | None = None, num_relations: int | None = None, p: int = 2):
    """A kgeval model (:mod:`kgeval.models`) holding the given embeddings.

    ``num_entities`` / ``num_relations`` (e.g. a dataset's) are checked against the matrices'
    row counts when given; ``p`` is TransE's distance norm. Non-float, NaN/inf or wrongly shaped
    matrices raise :class:`~kgeval.errors.InvalidInputError` naming the matrix.
    """
    from . import get_model

    key = str(interaction).lower()
    if key not in INTERACTIONS:
        raise unknown_name("interaction", interaction, INTERACTIONS)
    ent = _matrix("entity embeddings", entity)
    rel = _matrix("relation embeddings", relation, phases=key == "rotate")
    ent_dim = ent.shape[1]
    if key in ("complex", "rotate") and ent_dim % 2:
        raise InvalidInputError(f"{key} entity embeddings need an even width [re | im], got {ent_dim}")
    dim = ent_dim // 2 if key in ("complex", "rotate") else ent_dim
    want_rel = dim if key == "rotate" else ent_dim
    if rel.shape[1] != want_rel:
        raise InvalidInputError(
            f"{key}: relation embeddings must have width {want_rel} for entity width {ent_dim}"
            f"{' (phases, one per complex coordinate)' if key == 'rotate' else ''}, got {rel.shape[1]}")
    n_rel = rel.shape[0] // 2 if inverse_relations else rel.shape[0]
    if inverse_relations and rel.shape[0] % 2:
        raise InvalidInputError(f"inverse_relations=True needs an even number of relation rows (2R), got {rel.shape[0]}")
    _check_count("entity", ent.shape[0], num_entities)
    _check_count("relation", n_rel, num_relations, " (relation rows / 2 with inverse relations)"
                 if inverse_relations else "")
    kwargs = {"p": p, "normalize_entities": False} if key == "transe" else {}
    model = get_model(key, ent.shape[0], n_rel, dim=dim, inverse_relations=inverse_relations, **kwargs)
    with torch.no_grad():
        model.entity.weight.copy_(ent)
        model.relation.weight.copy_(rel)
    return model.eval()


def load_array(path, *, key: str | None = None, name: str = "embeddings") -> np.ndarray | torch.Tensor:
    """The matrix stored in a ``.npy`` / ``.npz`` / ``.pt`` file (see the module docstring)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InvalidInputError(f"{name} file {path!r} does not exist")
    suffix = os.path.splitext(path)[1].lower()
    try:
        if suffix == ".npy":
            return np.load(path, mmap_mode="r", allow_pickle=False)
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                return z[_pick(path, list(z.files), key, name)]
        if suffix in (".pt", ".pth"):
            blob = torch.load(path, map_location="cpu", weights_only=True)
            if isinstance(blob, dict):
                tensors = [k for k, v in blob.items() if isinstance(v, torch.Tensor)]
                blob = blob[_pick(path, tensors, key, name)]
            if not isinstance(blob, torch.Tensor):
                raise InvalidInputError(f"{name} file {path!r} holds a {type(blob).__name__}, not a tensor")
            return blob
    except InvalidInputError:
        raise
    except Exception as exc:  # ValueError (pickled objects), UnpicklingError, zip errors, ...
        raise InvalidInputError(f"{name} file {path!r} is not readable ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
    raise InvalidInputError(f"{name} file {path!r}: unsupported extension {suffix!r} (use .npy, .npz or .pt)")


def _pick(path: str, names: list[str], key: str | None, what: str) -> str:
    if key is not None:
        if key not in names:
            raise InvalidInputError(f"{what} file {path!r} has no array {key!r}; it holds {names}")
        return key
    if len(names) != 1:
        raise InvalidInputError(f"{what} file {path!r} holds {len(names)} arrays {names}; name the one to use")
    return names[0]


def _matrix(name: str, values, *, phases: bool = False) -> torch.Tensor:
    """A finite float32/64 ``(n, d)`` tensor; complex input becomes ``[re | im]`` (or phases)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        if values.dtype == torch.bfloat16 or values.dtype == torch.float16:
            values = values.float()
        values = values.numpy()
    arr = np.asarray(values)
    if arr.ndim != 2 or 0 in arr.shape:
        raise InvalidInputError(f"{name} must be a non-empty 2-d matrix (rows = ids), got shape {arr.shape}")
    if np.iscomplexobj(arr):
        if phases:
            if not np.allclose(np.abs(arr), 1.0, atol=1e-4):
                raise InvalidInputError(f"{name}: complex rotate relations must have modulus 1")
            arr = np.angle(arr)
        else:
            arr = np.concatenate([arr.real, arr.imag], axis=1)
    if arr.dtype.kind != "f":
        raise InvalidInputError(f"{name} must hold floats, got dtype {arr.dtype}")
    out = torch.from_numpy(np.array(arr, dtype=np.float64 if arr.dtype == np.float64 else np.float32))
    bad = ~torch.isfinite(out)
    if bool(bad.any()):
        row = int(bad.any(dim=1).nonzero()[0, 0])
        raise InvalidInputError(f"{name} contain NaN or infinite values (first in row {row})")
    return out


def _check_count(kind: str, found: int, expected: int | None, note: str = "") -> None:
    if expected is not None and found != expected:
        raise InvalidInputError(f"the {kind} embeddings have {found} rows{note} but the dataset has {expected} "
                                f"{'entities' if kind == 'entity' else 'relations'}")
