"""Build a kgeval model from plain embedding matrices trained anywhere.

:func:`from_embeddings` ``(interaction, entity, relation)`` turns the matrices into one of kgeval's
own models, whose layouts are (``d`` = complex dimension):

- ``transe`` / ``distmult``: entity ``(E, d)``, relation ``(R, d)``;
- ``complex``: entity ``(E, 2d)``, relation ``(R, 2d)``, each row ``[re | im]``
  (LibKGE's and kgeval's layout; complex-dtype arrays are converted to it);
- ``rotate``: entity ``(E, 2d)`` as ``[re | im]``, relation ``(R, d)`` phases in radians
  (a complex-dtype relation array is converted with ``angle``; its moduli must be 1).

``inverse_relations=True`` means the relation matrix holds ``2R`` rows, row ``r + R`` being
the inverse of ``r`` (head queries are answered as tail queries of the inverse).

**Entity tables on disk (millions of entities).** ``entity`` may be a path or a memory-mapped
array: a ``.npy`` path (opened with ``np.load(mmap_mode="c")``), an ``np.memmap`` / ``np.load(...,
mmap_mode=...)`` array, or a file-backed tensor (``torch.from_file(..., shared=True)``). A
native-endian float32 or float64 table is then used **in place**: the model's entity weight is a
view of the mapping (never copied, never converted), checked for NaN/inf block by block, and the
evaluator scores it in entity chunks (``entity_chunk_size``, automatic when whole rows do not fit
the memory budget), so only the pages being scored are read. Peak resident memory besides the
mapped file pages (page cache, reclaimable by the kernel) is

    O(relation table + batch x entity_chunk (score block, ~14 B per entry, within
      ``memory_budget``, 1 GiB by default) + filter index of the evaluated queries + per-task counts)

and independent of the number of entities times ``dim`` (measured by ``benchmarks/scale.py``).
Any other dtype of a memory-mapped table is converted into an in-memory copy, block by block:
float16 -> float32, non-native byte order -> native of the same precision, complex64/128 (ComplEx / RotatE) -> ``[re | im]``
float32/64 (``E x width x 4`` or ``8`` bytes of RAM, no larger temporaries). The relation table
is always copied (it is small) and converted to the entity table's dtype. In-memory arrays and
ordinary tensors are copied, so changing them later does not change the model.

Wrong shapes (not 2-D, empty, rows != ``num_entities`` / ``num_relations``, a width that does not
match the relation table), non-float dtypes and NaN/inf values raise
:class:`~kgeval.errors.InvalidInputError` naming the matrix, before any scoring; so does a
truncated or corrupt ``.npy`` file (:func:`load_array`).

:func:`load_array` reads ``.npy`` (memory-mapped: a large file is paged in as scored, never read
whole), ``.npz`` (the only array, or the one named by ``key``) and ``.pt`` files (``weights_only``
loading: a tensor, or a dict holding exactly one tensor / the one named by ``key``).
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import torch
from torch import nn

from ..errors import InvalidInputError, unknown_name
from .registry import get_model
from .shard import EntityShard, _shard_range

INTERACTIONS = ("complex", "distmult", "rotate", "transe")

#: dtypes a memory-mapped entity table is used in place with (native byte order)
STREAMED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: elements per block when a large table is checked or converted (64 MiB of float32)
_BLOCK_ELEMENTS = 1 << 24


def from_embeddings(interaction: str, entity, relation, *, inverse_relations: bool = False,
                    num_entities: int | None = None, num_relations: int | None = None, p: int = 2):
    """A kgeval model (:mod:`kgeval.models`) holding the given embeddings.

    ``entity`` / ``relation``: arrays, tensors or paths (:func:`load_array`); a memory-mapped
    float32/float64 entity table (a ``.npy`` path, an ``np.memmap``, a ``torch.from_file(shared=True)``
    tensor) is used in place and streamed in entity chunks by the evaluator: peak RSS
    ``O(relations + batch x entity_chunk + filter index)`` besides the mapped pages, whatever the
    table's size (see the module docstring for the dtypes and the exact bound).
    ``num_entities`` / ``num_relations`` (e.g. a dataset's) are checked against the matrices'
    row counts when given; ``p`` is TransE's distance norm. Non-float, NaN/inf or wrongly shaped
    matrices raise :class:`~kgeval.errors.InvalidInputError` naming the matrix, before any work
    proportional to the table (shapes and dtypes are checked first, then values block by block).

    Examples
    --------
    >>> import numpy as np
    >>> from kgeval.models import from_embeddings
    >>> model = from_embeddings("distmult", np.ones((5, 4)), np.ones((2, 4)))
    >>> model.num_entities
    5
    """
    key = str(interaction).lower()
    if key not in INTERACTIONS:
        raise unknown_name("interaction", interaction, INTERACTIONS)
    if isinstance(entity, (str, os.PathLike)):
        entity = load_array(entity, name="entity embeddings")
    if isinstance(relation, (str, os.PathLike)):
        relation = load_array(relation, name="relation embeddings")
    ent_arr, ent_mapped = _array("entity embeddings", entity)
    rel_arr, _ = _array("relation embeddings", relation)
    # the row counts first: a transposed table (dim x ids) is named as such, not as a relation
    # table of the wrong width
    _check_count("entity", ent_arr.shape[0], num_entities, " (a transposed table, dim x entities?)"
                 if ent_arr.shape[1] == num_entities else "")
    n_rel = rel_arr.shape[0] // 2 if inverse_relations else rel_arr.shape[0]
    if inverse_relations and rel_arr.shape[0] % 2:
        raise InvalidInputError(
            f"inverse_relations=True needs an even number of relation rows (2R), got {rel_arr.shape[0]}")
    _check_count("relation", n_rel, num_relations, " (relation rows / 2 with inverse relations)"
                 if inverse_relations else " (a transposed table, dim x relations?)"
                 if rel_arr.shape[1] in (num_relations, 2 * (num_relations or 0)) else "")
    ent_dim = _width(ent_arr)
    if key in ("complex", "rotate") and ent_dim % 2:
        raise InvalidInputError(f"{key} entity embeddings need an even width [re | im], got {ent_dim}")
    dim = ent_dim // 2 if key in ("complex", "rotate") else ent_dim
    want_rel = dim if key == "rotate" else ent_dim
    rel_dim = rel_arr.shape[1] if key == "rotate" else _width(rel_arr)
    if rel_dim != want_rel:
        raise InvalidInputError(
            f"{key}: relation embeddings must have width {want_rel} for entity width {ent_dim}"
            f"{' (phases, one per complex coordinate)' if key == 'rotate' else ''}, got {rel_dim}")
    # the (possibly huge) entity table: in place when mapped and streamable, else one copy
    ent = _entity_tensor(ent_arr, ent_mapped)
    rel = _small_matrix("relation embeddings", rel_arr, phases=key == "rotate", dtype=ent.dtype)
    kwargs = {"p": p, "normalize_entities": False} if key == "transe" else {}
    # built for one entity (no E x width allocation or initialisation), then given the real tables. Not
    # on the meta device, as until 2026-11-24: its first initialiser makes torch import sympy and ~800 other
    # modules, ~1.1-1.5 s once per process (every `kgeval evaluate --entity-embeddings`, every rank)
    model = get_model(key, 1, n_rel, dim=dim, inverse_relations=inverse_relations, **kwargs)
    model.num_entities = int(ent.shape[0])
    model.entity = nn.Embedding(ent.shape[0], ent.shape[1], _weight=ent, _freeze=ent_mapped is not None)
    model.relation.weight = nn.Parameter(rel, requires_grad=True)
    tables = {"entity.weight", "relation.weight"}
    other = [n for n, _ in [*model.named_parameters(), *model.named_buffers()] if n not in tables]
    if other:  # pragma: no cover - the four interactions hold exactly these two tables
        raise RuntimeError(f"from_embeddings: {key} holds tensors besides its two tables: {other}")
    #: the memory-mapped file the entity weight is a view of (None: an in-memory copy)
    model.entity_source = ent_mapped
    return model.eval()


def load_array(path, *, key: str | None = None, name: str = "embeddings") -> np.ndarray | torch.Tensor:
    """The matrix stored in a ``.npy`` / ``.npz`` / ``.pt`` file (see the module docstring).

    ``.npy`` is memory-mapped copy-on-write (``mmap_mode="c"``): nothing is read until used and the
    file is never written. A truncated file, a corrupt header or pickled objects raise
    :class:`~kgeval.errors.InvalidInputError` naming the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InvalidInputError(f"{name} file {path!r} does not exist")
    suffix = os.path.splitext(path)[1].lower()
    try:
        if suffix == ".npy":
            return np.load(path, mmap_mode="c", allow_pickle=False)
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
    except Exception as exc:  # ValueError (pickled objects, truncated data), UnpicklingError, zip errors, ...
        raise InvalidInputError(f"{name} file {path!r} is not readable ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
    raise InvalidInputError(f"{name} file {path!r}: unsupported extension {suffix!r} (use .npy, .npz or .pt)")


class ArrayChoiceError(InvalidInputError):
    """An ``.npz`` / ``.pt`` file whose array cannot be chosen: ``key`` names none of ``names``, or no
    ``key`` was given and the file holds several arrays (or none). Its fields let a caller word the
    error in its own terms (``kgeval evaluate`` names ``FILE:NAME``)."""

    def __init__(self, message: str, *, path: str, names: list[str], key: str | None):
        super().__init__(message)
        self.path, self.names, self.key = path, list(names), key


def _pick(path: str, names: list[str], key: str | None, what: str) -> str:
    if key is not None:
        if key not in names:
            raise ArrayChoiceError(f"{what} file {path!r} has no array {key!r}; it holds {names}",
                                   path=path, names=names, key=key)
        return key
    if len(names) != 1:
        raise ArrayChoiceError(f"{what} file {path!r} holds {len(names)} arrays {names}; name the one to use "
                               "with key=", path=path, names=names, key=None)
    return names[0]


def _mapped_source(values) -> str | None:
    """A description of the file ``values`` is memory-mapped from, or None for ordinary memory."""
    if isinstance(values, np.memmap) or isinstance(getattr(values, "base", None), np.memmap) \
            or _base_is_mmap(values):
        return str(getattr(values, "filename", None) or "memory-mapped array")
    if isinstance(values, torch.Tensor) and values.device.type == "cpu":
        try:
            filename = values.untyped_storage().filename
        except (AttributeError, RuntimeError):
            filename = None
        if filename:
            return str(filename)
    return None


def _base_is_mmap(values) -> bool:
    """Whether a numpy array's memory belongs to an ``mmap.mmap`` (views of ``np.memmap`` included)."""
    import mmap

    base = values
    for _ in range(8):
        base = getattr(base, "base", None)
        if base is None:
            return False
        if isinstance(base, mmap.mmap):
            return True
    return False


def _array(name: str, values) -> tuple[np.ndarray, str | None]:
    """``(numpy view of values, mapped file or None)``, with ndim, emptiness and dtype kind checked.

    Nothing proportional to the array's size happens here (tensors become numpy views).
    """
    mapped = _mapped_source(values)
    if isinstance(values, torch.Tensor):
        values = values.detach()
        if values.device.type != "cpu":
            values = values.cpu()
        if values.dtype == torch.bfloat16:  # numpy has no bfloat16
            values = values.float()
        try:
            arr = values.numpy()
        except (TypeError, RuntimeError) as exc:
            raise InvalidInputError(f"{name} must hold floats, got a tensor of dtype {values.dtype}") from exc
    else:
        try:
            arr = np.asarray(values)
        except Exception as exc:
            raise InvalidInputError(f"{name} must be a 2-d float matrix, got {type(values).__name__}") from exc
    if arr.ndim != 2 or 0 in arr.shape:
        raise InvalidInputError(f"{name} must be a non-empty 2-d matrix (rows = ids), got shape {arr.shape}")
    if arr.dtype.kind not in "fc":
        raise InvalidInputError(f"{name} must hold floats (float16/32/64, or complex64/128 for complex "
                                f"embeddings), got dtype {arr.dtype}")
    return arr, mapped


def _width(arr: np.ndarray) -> int:
    """Real width: a complex matrix becomes ``[re | im]``."""
    return arr.shape[1] * (2 if arr.dtype.kind == "c" else 1)


def _blocks(n_rows: int, width: int):
    step = max(1, _BLOCK_ELEMENTS // max(1, width))
    for lo in range(0, n_rows, step):
        yield lo, min(n_rows, lo + step)


def _check_finite(name: str, arr: np.ndarray) -> None:
    """NaN/inf check block by block (no table-sized temporary)."""
    for lo, hi in _blocks(arr.shape[0], arr.shape[1]):
        block = np.asarray(arr[lo:hi])
        if not np.isfinite(block).all():
            row = lo + int(np.flatnonzero(~np.isfinite(block).all(axis=1))[0])
            raise InvalidInputError(f"{name} contain NaN or infinite values (first in row {row})")


def _entity_tensor(arr: np.ndarray, mapped: str | None) -> torch.Tensor:
    """The entity table as a tensor: a view of a streamable mapping, else one converted copy."""
    _check_finite("entity embeddings", arr)
    if mapped is not None and arr.dtype in STREAMED_DTYPES and arr.dtype.isnative:
        with warnings.catch_warnings():  # a read-only mapping: kgeval never writes entity weights
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            try:
                return torch.from_numpy(arr)
            except ValueError:  # negative strides: torch cannot view them, use a copy
                pass
    # the precision is kept whatever the byte order: a big-endian float64 / complex128 table is not
    # native float64, and comparing the dtype with np.float64 made it float32 (ranks of nearly tied
    # candidates changed, values beyond float32's range became inf after the finite check)
    real = np.float64 if arr.dtype.itemsize // (2 if arr.dtype.kind == "c" else 1) >= 8 else np.float32
    if arr.dtype.kind == "c":
        out = np.empty((arr.shape[0], 2 * arr.shape[1]), dtype=real)
        d = arr.shape[1]
        for lo, hi in _blocks(arr.shape[0], 2 * d):
            block = np.asarray(arr[lo:hi])
            out[lo:hi, :d] = block.real
            out[lo:hi, d:] = block.imag
        return torch.from_numpy(out)
    out = np.empty(arr.shape, dtype=real)  # a copy: changing the caller's array later does not change the model
    for lo, hi in _blocks(arr.shape[0], arr.shape[1]):
        out[lo:hi] = arr[lo:hi]
    return torch.from_numpy(out)


def _small_matrix(name: str, arr: np.ndarray, *, phases: bool, dtype: torch.dtype) -> torch.Tensor:
    """A finite copy of a (small) matrix in ``dtype``; complex input becomes ``[re | im]`` (or phases)."""
    if np.iscomplexobj(arr):
        if phases:
            if not np.allclose(np.abs(arr), 1.0, atol=1e-4):
                raise InvalidInputError(f"{name}: complex rotate relations must have modulus 1")
            arr = np.angle(arr)
        else:
            arr = np.concatenate([arr.real, arr.imag], axis=1)
    out = torch.from_numpy(np.array(arr, dtype=np.float64)).to(dtype)
    bad = ~torch.isfinite(out)
    if bool(bad.any()):
        row = int(bad.any(dim=1).nonzero()[0, 0])
        raise InvalidInputError(f"{name} contain NaN or infinite values (first in row {row})")
    return out


def _check_count(kind: str, found: int, expected: int | None, note: str = "") -> None:
    if expected is not None and found != expected:
        raise InvalidInputError(f"the {kind} embeddings have {found} rows{note} but the dataset has {expected} "
                                f"{'entities' if kind == 'entity' else 'relations'}")


def shard_embeddings(interaction: str, entity, relation, *, rank: int, world: int, num_entities: int | None = None,
                     rows=None, **kwargs) -> EntityShard:
    """:func:`~kgeval.models.from_embeddings` on the rows of ``entity`` this rank holds.

    ``entity``: the whole entity matrix (array, tensor, ``np.memmap``) or a path to a ``.npy`` file,
    which is memory-mapped so only the local rows are read. ``num_entities`` (e.g. the dataset's) is
    checked against the matrix's rows; ``rows`` (a permutation of ``0 .. n-1``, optional): ``rows[i]`` is
    the matrix row of entity id ``i`` (ids ``lo .. hi`` are read from rows ``rows[lo:hi]``, default: row
    ``i``); other keywords go to ``from_embeddings``.
    """
    if isinstance(entity, (str, os.PathLike)):
        entity = load_array(entity, name="entity embeddings")
    shape = getattr(entity, "shape", None)
    if shape is None or len(shape) != 2:
        raise InvalidInputError(f"entity embeddings must be a 2-d matrix (rows = ids), got shape {shape}")
    n = int(shape[0])
    if num_entities is not None and n != int(num_entities):
        raise InvalidInputError(f"the entity embeddings have {n} rows but the dataset has {num_entities} entities")
    lo, hi = _shard_range(n, rank, world)
    if rows is None:
        local_rows = entity[lo:hi]
    else:
        import numpy as np

        rows = np.asarray(rows)
        if rows.shape != (n,) or not np.array_equal(np.sort(rows), np.arange(n)):
            raise InvalidInputError(f"rows must be a permutation of 0..{n - 1} (one matrix row per entity id)")
        local_rows = entity[torch.from_numpy(rows[lo:hi])] if isinstance(entity, torch.Tensor) else entity[rows[lo:hi]]
    local = from_embeddings(interaction, local_rows, relation, **kwargs)
    return EntityShard(local, entity_offset=lo, num_entities=n)
