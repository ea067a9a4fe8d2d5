"""Shared input checks: every layer validates through these, so a user mistake gets the same
clear message everywhere (in the spirit of scikit-learn's ``check_array`` /
``check_consistent_length``).

Each checker takes the argument's *name* first so the message can say which argument is wrong,
and raises :class:`~kgeval.errors.InvalidInputError` (a ``ValueError``), never a numpy/torch error.
"""

from __future__ import annotations

import enum
import numbers

import numpy as np

from .errors import InvalidInputError

__all__ = [
    "Side",
    "to_numpy",
    "as_1d",
    "as_whole_numbers",
    "check_positive_int",
    "check_nonnegative_int",
    "check_int",
    "check_positive_number",
    "check_probability",
    "check_weights",
    "check_same_length",
    "check_seed",
    "check_score_tensor",
    "check_entity_count",
]


class Side(enum.IntEnum):
    """The side of a ranking task: predict the head (``HEAD``), the tail (``TAIL``) or the relation
    (``RELATION``) of a triple.

    ``NONE`` marks tasks whose side is unknown (e.g. a rank file without a ``side`` column); such
    tasks count only towards ``both``.
    """

    NONE = -1
    HEAD = 0
    TAIL = 1
    #: relation prediction: the task (h, ?, t) ranks the true relation (:mod:`kgeval.evaluation.relations`)
    RELATION = 2

    @property
    def label(self) -> str:
        return {Side.HEAD: "head", Side.TAIL: "tail", Side.NONE: "both", Side.RELATION: "relation"}[self]

    @classmethod
    def parse(cls, value) -> Side:
        """``'head'``/``'left'``/``0`` -> HEAD, ``'tail'``/``'right'``/``1`` -> TAIL, ``-1`` -> NONE."""
        if isinstance(value, Side):
            return value
        if isinstance(value, str):
            key = value.strip().lower()
            if key in ("head", "left"):
                return cls.HEAD
            if key in ("tail", "right"):
                return cls.TAIL
            if key in ("relation", "rel"):
                return cls.RELATION
        elif isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_)):
            if int(value) in (-1, 0, 1, 2):
                return cls(int(value))
        raise InvalidInputError(f"unknown side {value!r}; expected 'head', 'tail' or 'relation'")


def to_numpy(name: str, value) -> np.ndarray:
    """``value`` (array-like or torch tensor, any device/dtype) as a numpy array.

    bfloat16/float16 tensors are widened to float32 (numpy has no bfloat16).
    """
    try:
        if hasattr(value, "detach"):  # torch tensor, without importing torch here
            t = value.detach()
            if getattr(t, "dtype", None) is not None and str(t.dtype) in ("torch.bfloat16", "torch.float16"):
                t = t.float()
            return t.cpu().numpy()
        return np.asarray(value)
    except InvalidInputError:
        raise
    except Exception as exc:
        raise InvalidInputError(f"{name}: cannot be converted to an array ({type(exc).__name__}: {exc})") from None


def as_1d(name: str, value, kinds: str | None = None, *, allow_empty: bool = True) -> np.ndarray:
    """``value`` as a one-dimensional array (a scalar becomes length 1).

    ``kinds`` restricts numpy dtype kinds (e.g. ``"iuf"`` for numbers, ``"b"`` for booleans).
    """
    arr = to_numpy(name, value)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise InvalidInputError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if kinds is not None and arr.size and arr.dtype.kind not in kinds:
        what = {"iu": "integers", "iuf": "numbers", "b": "booleans"}.get(kinds, f"dtype kind in {kinds!r}")
        raise InvalidInputError(f"{name} must hold {what}, got dtype {arr.dtype}")
    if not allow_empty and arr.size == 0:
        raise InvalidInputError(f"{name} is empty")
    return arr


def as_whole_numbers(name: str, value, *, minimum: int | None = None) -> np.ndarray:
    """A 1-d int64 array of whole numbers; floats are accepted only when they are exact integers
    (``0.5`` or ``1.7`` is an error, never silently truncated)."""
    arr = as_1d(name, value, "iuf")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (np.abs(arr) > 2**62)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(f"{name} must hold whole numbers, got {arr[i]} at position {i}")
    elif arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        i = int(np.argmax(arr))
        raise InvalidInputError(f"{name}: value {arr[i]} at position {i} is too large")
    arr = arr.astype(np.int64)
    if minimum is not None and arr.size and arr.min() < minimum:
        i = int(np.argmin(arr))
        raise InvalidInputError(f"{name} must be >= {minimum}, got {arr[i]} at position {i}")
    return arr


def _is_int(value) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_bool(name: str, value, *, allow_none: bool = False):
    """``True`` or ``False`` (numpy's bool too); anything else is refused rather than read by truthiness:
    ``bool("false")`` is ``True``, so a configuration file's ``"false"`` would silently mean the opposite."""
    if value is None and allow_none:
        return None
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidInputError(f"{name} must be True or False{' or None' if allow_none else ''}, got {value!r}")
    return bool(value)


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None, allow_none=False):
    """An integer (``bool`` is refused) within ``[minimum, maximum]``; returns a plain ``int``."""
    if value is None and allow_none:
        return None
    if not _is_int(value):
        raise InvalidInputError(f"{name} must be an integer{' or None' if allow_none else ''}, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise InvalidInputError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_positive_int(name: str, value, *, allow_none: bool = False, maximum: int | None = None):
    """A positive integer (``bool`` refused), at most ``maximum`` when given; returns a plain ``int``
    (or None when allowed)."""
    if value is None and allow_none:
        return None
    if not _is_int(value) or value < 1:
        raise InvalidInputError(f"{name} must be a positive integer{' or None' if allow_none else ''}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{name} must be at most {maximum}, got {value!r}")
    return int(value)


def check_nonnegative_int(name: str, value, *, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if not _is_int(value) or value < 0:
        raise InvalidInputError(
            f"{name} must be a non-negative integer{' or None' if allow_none else ''}, got {value!r}"
        )
    return int(value)


def check_positive_number(name: str, value, *, allow_none: bool = False):
    """A finite number > 0 (``bool`` refused); returns a ``float``."""
    if value is None and allow_none:
        return None
    ok = isinstance(value, (numbers.Real, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not ok or not np.isfinite(float(value)) or not float(value) > 0:
        raise InvalidInputError(f"{name} must be a positive number{' or None' if allow_none else ''}, got {value!r}")
    return float(value)


def check_probability(name: str, value, *, open_interval: bool = True) -> float:
    """A number in (0, 1) (or [0, 1] with ``open_interval=False``)."""
    ok = isinstance(value, (numbers.Real, np.floating)) and not isinstance(value, (bool, np.bool_))
    v = float(value) if ok else float("nan")
    inside = (0 < v < 1) if open_interval else (0 <= v <= 1)
    if not inside:
        rng = "(0, 1)" if open_interval else "[0, 1]"
        raise InvalidInputError(f"{name} must be a number in {rng}, got {value!r}")
    return v


def check_weights(name: str, weights, n: int | None = None, *, normalise: bool = False) -> np.ndarray:
    """Non-negative finite weights with at least one positive, as float64.

    Weights are relative: they are rescaled by their maximum *before* any sum, so weights of
    1e308 each behave like weights of 1 instead of overflowing to inf and turning every metric
    into NaN. With ``normalise=True`` the result sums to 1.
    """
    w = as_1d(name, weights, "iuf").astype(np.float64)
    if n is not None and w.shape[0] != n:
        raise InvalidInputError(f"length mismatch: {n} tasks but {w.shape[0]} {name}")
    if w.size == 0:
        raise InvalidInputError(f"{name} is empty: at least one task is needed")
    if not np.all(np.isfinite(w)):
        i = int(np.flatnonzero(~np.isfinite(w))[0])
        raise InvalidInputError(f"{name} contain a NaN or infinite value ({w[i]}) at position {i}")
    if np.any(w < 0):
        i = int(np.flatnonzero(w < 0)[0])
        raise InvalidInputError(f"{name} must be non-negative, got {w[i]} at position {i}")
    top = w.max()
    if not top > 0:
        raise InvalidInputError(f"{name} are all zero: at least one task must have positive weight")
    w = w / top  # relative weights: rescale before summing (no overflow)
    if normalise:
        w = w / w.sum()
    return w


def check_same_length(**arrays) -> int:
    """All given arrays (None skipped) have the same first dimension; returns it."""
    lengths = {k: len(v) for k, v in arrays.items() if v is not None}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k}: {v}" for k, v in lengths.items())
        raise InvalidInputError(f"length mismatch: {desc}")
    return next(iter(lengths.values()), 0)


#: random seeds are 32-bit: numpy's legacy ``np.random.seed`` (and Python's hashing of it) takes 0 <= seed < 2**32
SEED_LIMIT = 2**32


def check_seed(name: str, value, *, allow_none: bool = False):
    """A random seed: an integer with ``0 <= seed < 2**32`` (``bool`` refused), the range every
    generator kgeval seeds (numpy, torch, Python, Optuna) accepts; returns a plain ``int``."""
    if value is None and allow_none:
        return None
    if not _is_int(value) or not 0 <= value < SEED_LIMIT:
        raise InvalidInputError(
            f"{name} must be an integer in [0, 2**32){' or None' if allow_none else ''}, got {value!r}"
        )
    return int(value)


def check_score_tensor(name: str, out, shape: tuple[int, ...], what: str = "") -> None:
    """A scorer's returned scores: a dense (strided) real floating-point torch tensor of ``shape``
    on a device that holds data, else one :class:`~kgeval.errors.InvalidInputError` naming the
    scorer method ``name`` (e.g. ``"scorer.score_tails"``).

    Checked before any use, because each of these fails later deep inside torch with a message that
    names neither the scorer nor the problem: the ``meta`` device ("Cannot copy out of meta
    tensor"), sparse / MKL-DNN layouts ("Could not run 'aten::index.Tensor' with arguments from the
    'SparseCPU' backend"), nested tensors ("NestedTensorImpl doesn't support sizes"). ``what``
    describes the call for a shape mismatch (e.g. "tail prediction of 4 queries").

    Examples
    --------
    >>> import torch
    >>> check_score_tensor("scorer.score_tails", torch.zeros(2, 5), (2, 5))
    >>> check_score_tensor("scorer.score_tails", torch.zeros(2, 5, device="meta"), (2, 5))
    Traceback (most recent call last):
    ...
    kgeval.errors.InvalidInputError: scorer.score_tails returned scores on the 'meta' device, which holds no data; return them on a real device (e.g. 'cpu')
    """
    import torch

    if not isinstance(out, torch.Tensor):
        raise InvalidInputError(f"{name} must return a torch.Tensor, got {type(out).__name__}")
    if out.is_nested:
        raise InvalidInputError(f"{name} returned a nested tensor; return one dense (b, n) tensor of scores")
    if out.layout != torch.strided:
        raise InvalidInputError(
            f"{name} returned a {str(out.layout).replace('torch.', '')} tensor; return dense scores "
            "(e.g. .to_dense()): every candidate needs a score"
        )
    if out.device.type == "meta":
        raise InvalidInputError(
            f"{name} returned scores on the 'meta' device, which holds no data; "
            "return them on a real device (e.g. 'cpu')"
        )
    if tuple(out.shape) != tuple(shape):
        extra = f" ({what})" if what else ""
        raise InvalidInputError(f"{name} returned shape {tuple(out.shape)}, expected {tuple(shape)}{extra}")
    if not out.is_floating_point():
        raise InvalidInputError(f"{name} must return floating-point scores, got dtype {out.dtype}")


def check_entity_count(num_entities: int, host_free: int | None, device_free: int | None = None, *,
                       score_row: bool = True) -> None:
    """Refuse a declared entity count whose per-entity arrays cannot fit, before any is allocated.

    Ranking over ``n`` entities holds at least the int64 candidate ids (``8 n`` bytes, on the host)
    and one float32 score row (``4 n`` bytes, on the host, or on the device when ``device_free`` is
    given). Without this check a scorer declaring ``2**31`` entities ended in numpy's raw
    ``_ArrayMemoryError`` for a 16 GiB ``arange``; ``None`` for a free size means unknown (no check).

    Parameters
    ----------
    num_entities : int
        The scorer's declared ``num_entities``.
    host_free, device_free : int or None
        Free bytes on the host and, for an accelerator evaluation, on the device.
    score_row : bool
        Whether a whole score row is needed (False for an entity shard, which scores its slice only).

    Raises
    ------
    InvalidInputError
        Naming the count, the bytes needed and the bytes free.

    Examples
    --------
    >>> check_entity_count(1000, host_free=2**30)
    >>> check_entity_count(2**31, host_free=2**30)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kgeval.errors.InvalidInputError: the scorer's num_entities=2147483648 does not fit in memory: ...
    """
    n = int(num_entities)
    row = 4 * n if score_row else 0
    needs = [("host", 8 * n + (row if device_free is None else 0), host_free)]
    if device_free is not None and row:
        needs.append(("device", row, device_free))
    for where, need, free in needs:
        if free is not None and need > free:
            raise InvalidInputError(
                f"the scorer's num_entities={n} does not fit in memory: ranking needs at least "
                f"{need / 2**30:.1f} GiB on the {where} for its per-entity arrays (candidate ids and one "
                f"score row), {free / 2**30:.1f} GiB is free. Is num_entities right?"
            )
