"""The rank table: one row per ranking task, the central artifact of kgeval.

Every number kgeval reports is a pure function of a :class:`RankTable`. A row holds

- ``side``: 0 = head prediction ``(?, r, t)``, 1 = tail prediction ``(h, r, ?)``,
  -1 = unspecified (all such rows form one pool, reported as ``both``); see :class:`Side`;
- ``optimistic``: 1 + #(candidates scoring strictly better than the true answer);
- ``pessimistic``: optimistic + #(other candidates tying with the true answer);
- ``num_candidates``: how many candidates were ranked, the true answer included and
  filtered answers excluded (may be absent: then metrics needing it are unavailable);
- ``weight``: a non-negative scaling factor (absent = all ones);
- ``triple_index`` / ``relation``: which evaluation triple and relation the task came
  from (-1 when unknown), filled by the evaluator for breakdowns and macro averages.

Ranks come from counts, never from sorting, so tables from shards simply concatenate.
Every way of building a table (the constructor included) goes through one validation, and
the stored columns are read-only copies, so a table cannot hold an inconsistent row.
Reading and writing rank files lives in :mod:`kgeval.rankfile`.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

import numpy as np

from ._validation import Side, as_1d, as_whole_numbers, check_weights, to_numpy
from .errors import InvalidInputError

# Old spellings of the side codes, kept for callers that import them (Side is the one source).
SIDE_HEAD, SIDE_TAIL, SIDE_NONE = Side.HEAD, Side.TAIL, Side.NONE
SIDE_NAMES = {s: s.label for s in Side}

_COLUMNS = ("side", "optimistic", "pessimistic", "num_candidates", "weight", "triple_index", "relation")
_LARGEST = 2**62  # ranks and counts beyond this cannot be 1 + count without int64 overflow


def parse_side(value) -> Side:
    """:meth:`Side.parse`, plus the labels a rank file holds: ``'both'`` (= unspecified) and
    the codes ``'-1'``/``'0'``/``'1'`` written as text."""
    if isinstance(value, str):
        key = value.strip().lower()
        if key == "both":
            return Side.NONE
        if key in ("-1", "0", "1", "2"):
            return Side(int(key))
    return Side.parse(value)


def side_code(side) -> int:
    """The integer code of a side name (``'head'``/``'tail'``) or code; see :func:`parse_side`."""
    return int(parse_side(side))


def side_codes(side, n: int) -> np.ndarray:
    """The ``side`` column for ``n`` tasks as int8 codes: None (all unspecified), one side for
    all rows, or one side per row (names, codes or :class:`Side` members)."""
    if side is None:
        return np.full(n, Side.NONE, dtype=np.int8)
    if isinstance(side, (str, numbers.Integral, np.integer, np.str_)):
        return np.full(n, parse_side(side), dtype=np.int8)
    _refuse_bools("side", side, "'head'/'tail' names or 0/1/-1 codes")
    arr = as_1d("side", side)
    if arr.shape[0] != n:
        raise InvalidInputError(f"length mismatch: {n} ranks but {arr.shape[0]} sides")
    if arr.dtype.kind in "iuf":
        codes = as_whole_numbers("side", arr)
        bad = (codes < -1) | (codes > 2)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(
                f"side codes must be 0 (head), 1 (tail), 2 (relation) or -1 (unspecified), got {codes[i]} at "
                f"position {i}")
        return codes.astype(np.int8)
    cache: dict = {}
    out = np.empty(n, dtype=np.int8)
    for i, v in enumerate(arr.tolist()):
        try:
            out[i] = cache[v] if v in cache else cache.setdefault(v, parse_side(v))
        except TypeError:  # unhashable element
            out[i] = parse_side(v)
        except InvalidInputError as exc:
            raise InvalidInputError(f"{exc} (position {i})") from None
    return out


def _refuse_bools(name: str, values, what: str = "numbers") -> None:
    """``np.asarray([1, True])`` is ``[1, 1]``: a boolean inside a list of numbers would silently
    become 0/1, so lists are scanned for them (arrays of booleans are refused by their dtype)."""
    if isinstance(values, (list, tuple)):
        for i, v in enumerate(values):
            if isinstance(v, (bool, np.bool_)):
                raise InvalidInputError(f"{name} must hold {what}, got {v!r} at position {i}")


def _rank_column(name: str, values) -> np.ndarray:
    """1-based whole-number ranks (or candidate counts) as a fresh int64 array."""
    _refuse_bools(name, values)
    arr = as_1d(name, values, "iuf")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        i = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise InvalidInputError(f"{name} contains a non-finite value ({arr[i]}) at position {i}")
    try:
        out = as_whole_numbers(name, arr)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{exc} (pass optimistic and pessimistic ranks, not realistic ones)") from None
    if out.size and out.min() < 1:
        i = int(np.argmin(out))
        raise InvalidInputError(f"{name} must be >= 1 (ranks are 1-based), got {out[i]} at position {i}")
    if out.size and out.max() > _LARGEST:
        i = int(np.argmax(out))
        raise InvalidInputError(f"{name}: value {out[i]} at position {i} is too large (max 2**62)")
    return out


def _check_columns(side, optimistic, pessimistic, num_candidates, weight, triple_index, relation) -> dict:
    """Validate and normalise all columns; the one path every table goes through."""
    if optimistic is None:
        raise InvalidInputError("no ranks given: pass optimistic= (and pessimistic=) or ranks=")
    opt = _rank_column("optimistic ranks", optimistic)
    n = opt.shape[0]
    if n == 0:
        raise InvalidInputError("empty rank table: at least one ranking task is needed")
    pes = opt.copy() if pessimistic is None else _rank_column("pessimistic ranks", pessimistic)
    if pes.shape[0] != n:
        raise InvalidInputError(f"length mismatch: {n} optimistic ranks but {pes.shape[0]} pessimistic ranks")
    if np.any(pes < opt):
        i = int(np.flatnonzero(pes < opt)[0])
        raise InvalidInputError(f"pessimistic rank below optimistic rank at position {i} ({pes[i]} < {opt[i]})")
    nc = None
    if num_candidates is not None:
        _refuse_bools("num_candidates", num_candidates)
        scalar = np.ndim(num_candidates) == 0  # one count for every task; a list keeps its length
        nc = as_1d("num_candidates", num_candidates)
        nc = _rank_column("num_candidates", np.repeat(nc, n) if scalar else nc)
        if nc.shape[0] != n:
            raise InvalidInputError(f"length mismatch: {n} ranks but {nc.shape[0]} num_candidates")
        if np.any(pes > nc):
            i = int(np.flatnonzero(pes > nc)[0])
            raise InvalidInputError(
                f"rank above its number of candidates at position {i} "
                f"(pessimistic rank {pes[i]} > num_candidates {nc[i]})"
            )
    w = None
    if weight is not None:
        _refuse_bools("weights", weight)
        w = as_1d("weights", weight, "iuf").astype(np.float64)  # astype copies: the table owns it
        if w.shape[0] != n:
            raise InvalidInputError(f"length mismatch: {n} ranks but {w.shape[0]} weights")
        check_weights("weights", w, n)  # validation only: the stored weights stay as given
    ids = {}
    for name, col in (("triple_index", triple_index), ("relation", relation)):
        if col is not None:
            _refuse_bools(name, col)
            ids[name] = as_whole_numbers(name, col, minimum=-1)  # -1 = unknown
            if ids[name].shape[0] != n:
                raise InvalidInputError(f"length mismatch: {n} ranks but {ids[name].shape[0]} {name} values")
    cols = dict(side=side_codes(side, n), optimistic=opt, pessimistic=pes, num_candidates=nc, weight=w,
                triple_index=ids.get("triple_index"), relation=ids.get("relation"))
    for arr in cols.values():
        if arr is not None:
            arr.flags.writeable = False  # a table's rows cannot change behind its validation
    return cols


@dataclass(frozen=True, eq=False, kw_only=True)
class RankTable:
    """Columnar table of ranking tasks (see the module docstring for the columns).

    Build it with :meth:`from_ranks`, :meth:`from_counts` or :meth:`from_scores`, or directly
    (``RankTable(optimistic=..., pessimistic=..., side=...)``): every way validates the columns
    and stores read-only copies. ``pessimistic`` defaults to ``optimistic`` (no ties), ``side``
    to unspecified. Columns are keyword-only: ``RankTable(ranks)`` once read the ranks as the
    side column (codes 0/1 pass as head/tail) and silently built a table without ranks.

    Examples
    --------
    >>> from kgeval import RankTable
    >>> table = RankTable.from_ranks(optimistic=[1, 3], pessimistic=[1, 5], num_candidates=[10, 10])
    >>> len(table), table.pessimistic.tolist()
    (2, [1, 5])
    """

    side: np.ndarray | None = None
    optimistic: np.ndarray | None = None
    pessimistic: np.ndarray | None = None
    num_candidates: np.ndarray | None = None
    weight: np.ndarray | None = None
    triple_index: np.ndarray | None = None
    relation: np.ndarray | None = None

    #: the names of the columns, in file order (what :meth:`to_columns` and a rank file hold)
    COLUMNS: ClassVar[tuple[str, ...]] = _COLUMNS

    def __post_init__(self):
        for name, value in _check_columns(**{f.name: getattr(self, f.name) for f in fields(self)}).items():
            object.__setattr__(self, name, value)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_ranks(
        cls,
        optimistic=None,
        pessimistic=None,
        *,
        ranks=None,
        num_candidates=None,
        side=None,
        weights=None,
        triple_index=None,
        relation=None,
    ) -> RankTable:
        """Build a table from rank arrays.

        Give ``optimistic`` and ``pessimistic`` ranks, or a single ``ranks`` array (no ties).
        ``side`` is one side for all rows, or an array of 'head'/'tail' names or 0/1 codes;
        ``num_candidates`` may be one number for all rows.
        """
        if ranks is not None:
            if optimistic is not None or pessimistic is not None:
                raise InvalidInputError("give either ranks= or optimistic=/pessimistic=, not both")
            optimistic = ranks
        return cls(side=side, optimistic=optimistic, pessimistic=pessimistic, num_candidates=num_candidates,
                   weight=weights, triple_index=triple_index, relation=relation)

    @classmethod
    def from_counts(
        cls, num_better, num_tied, num_candidates=None, *, side=None, weights=None, triple_index=None, relation=None
    ) -> RankTable:
        """Build a table from counts: ``optimistic = 1 + num_better``,
        ``pessimistic = optimistic + num_tied`` (``num_tied`` excludes the true answer itself)."""
        _refuse_bools("num_better", num_better)
        _refuse_bools("num_tied", num_tied)
        better = as_whole_numbers("num_better", num_better, minimum=0)
        tied = as_whole_numbers("num_tied", num_tied, minimum=0)
        if better.shape != tied.shape:
            raise InvalidInputError(f"length mismatch: {better.shape[0]} num_better but {tied.shape[0]} num_tied")
        if better.size and max(int(better.max()), int(tied.max())) > _LARGEST // 2:
            raise InvalidInputError("counts of better/tied candidates are too large (max 2**61)")
        return cls.from_ranks(1 + better, 1 + better + tied, num_candidates=num_candidates, side=side,
                              weights=weights, triple_index=triple_index, relation=relation)

    @classmethod
    def from_scores(
        cls, scores, true_index, *, candidate_mask=None, side=None, weights=None, triple_index=None, relation=None
    ) -> RankTable:
        """Build a table from candidate scores (larger = better), exact float comparison.

        ``scores``: ``(n, m)`` scores of all candidates of each task, the true answer included,
        at column ``true_index[i]``. ``candidate_mask``: optional boolean ``(n, m)``, False for
        candidates that are not ranked (e.g. filtered); the true answer is always ranked.
        """
        s = to_numpy("scores", scores)
        if s.ndim != 2:
            raise InvalidInputError(f"scores must be a 2-d (tasks, candidates) array, got shape {s.shape}")
        if s.shape[0] == 0 or s.shape[1] == 0:
            raise InvalidInputError(f"scores are empty (shape {s.shape})")
        if s.dtype.kind not in "iuf":
            raise InvalidInputError(f"scores must be real numbers, got dtype {s.dtype}")
        if s.dtype.kind == "f" and np.isnan(s).any():
            row = int(np.flatnonzero(np.isnan(s).any(axis=1))[0])
            raise InvalidInputError(f"scores contain NaN (first in task {row})")
        _refuse_bools("true_index", true_index)
        idx = as_whole_numbers("true_index", true_index)
        if idx.shape[0] != s.shape[0]:
            raise InvalidInputError(f"length mismatch: {s.shape[0]} score rows but {idx.shape[0]} true indices")
        if np.any((idx < 0) | (idx >= s.shape[1])):
            i = int(np.flatnonzero((idx < 0) | (idx >= s.shape[1]))[0])
            raise InvalidInputError(f"true_index {idx[i]} at position {i} is out of range [0, {s.shape[1]})")
        rows = np.arange(s.shape[0])
        true = s[rows, idx][:, None]
        mask = np.ones(s.shape, dtype=bool) if candidate_mask is None else _boolean_mask(candidate_mask, s.shape)
        mask[rows, idx] = False  # count the true answer separately
        better = ((s > true) & mask).sum(axis=1)
        tied = ((s == true) & mask).sum(axis=1)
        return cls.from_counts(better, tied, num_candidates=mask.sum(axis=1) + 1, side=side, weights=weights,
                               triple_index=triple_index, relation=relation)

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return int(self.optimistic.shape[0])

    def __repr__(self) -> str:
        sides = ", ".join(f"{SIDE_NAMES[c]}={int((self.side == c).sum())}" for c in np.unique(self.side))
        return f"RankTable({len(self)} tasks: {sides}; candidates={'yes' if self.num_candidates is not None else 'no'})"

    @property
    def sides(self) -> list[str]:
        """Names of the sides present (``head``/``tail``/``relation``); empty when sides are unspecified."""
        return [s.label for s in (Side.HEAD, Side.TAIL, Side.RELATION) if np.any(self.side == s)]

    @property
    def has_entity_tasks(self) -> bool:
        """Whether any task ranks entities (head, tail or unspecified): ``both`` has tasks."""
        return bool(np.any(self.side != Side.RELATION))

    def subset(self, mask) -> RankTable:
        """Rows where ``mask`` selects: a boolean array of length ``len(self)`` or row indices."""
        m = to_numpy("mask", mask)
        if m.dtype.kind == "b":
            if m.shape != (len(self),):
                raise InvalidInputError(f"a boolean mask needs shape ({len(self)},), got {m.shape}")
        else:
            m = as_whole_numbers("row indices", m)
            if m.size and (m.min() < -len(self) or m.max() >= len(self)):
                raise InvalidInputError(f"row indices out of range for a table of {len(self)} tasks")
        cols = {c: None if getattr(self, c) is None else getattr(self, c)[m] for c in _COLUMNS}
        if cols["optimistic"].shape[0] == 0:
            raise InvalidInputError("the selection leaves no ranking task")
        return RankTable(**cols)

    def select_side(self, side: str) -> RankTable:
        """Tasks of one side; ``'both'`` returns the entity tasks (head and tail, not relation prediction)."""
        if isinstance(side, str) and side.strip().lower() == "both":
            if not np.any(self.side == Side.RELATION):
                return self
            if not self.has_entity_tasks:
                raise InvalidInputError("these ranks are relation prediction only: 'both' (head + tail) has no task; "
                                        "ask for relation.<rank type>.<metric>, e.g. relation.realistic.mrr")
            return self.subset(self.side != Side.RELATION)
        return self.subset(self.side == Side.parse(side))

    def ranks(self, rank_type: str) -> np.ndarray:
        """Rank array for ``optimistic``, ``pessimistic``, ``realistic`` (their mean, as PyKEEN) or
        ``rounded_mean`` (LibKGE's ``rounded_mean_rank``, an integer).

        ``rounded_mean = optimistic + floor((pessimistic - optimistic + 1) / 2)``: LibKGE's 0-based
        ``#better + #ties // 2`` with ``#ties`` counting the true answer itself, plus one. It is the
        realistic rank rounded up where that is a half (optimistic 2, pessimistic 3: 3) and equal to it
        otherwise, so it is never better than the realistic rank.

        Examples
        --------
        >>> from kgeval import RankTable
        >>> t = RankTable.from_ranks(optimistic=[1, 2, 2], pessimistic=[1, 3, 4])
        >>> t.ranks("realistic").tolist(), t.ranks("rounded_mean").tolist()
        ([1.0, 2.5, 3.0], [1.0, 3.0, 3.0])
        """
        if rank_type == "rounded_mean":
            return (self.optimistic + (self.pessimistic - self.optimistic + 1) // 2).astype(np.float64)
        if rank_type == "optimistic":
            return self.optimistic.astype(np.float64)
        if rank_type == "pessimistic":
            return self.pessimistic.astype(np.float64)
        if rank_type == "realistic":
            return 0.5 * (self.optimistic.astype(np.float64) + self.pessimistic)  # no int64 overflow near 2**62
        raise InvalidInputError(f"no single rank array for rank type {rank_type!r}")

    @staticmethod
    def concat(tables: Sequence[RankTable]) -> RankTable:
        """Concatenate tables (e.g. shards of one evaluation). Optional columns present in
        only some tables are filled (candidates: error; weight: 1; ids: -1)."""
        tables = list(tables)
        if not tables:
            raise InvalidInputError("nothing to concatenate: no rank tables given")
        cols = {}
        for c in _COLUMNS:
            parts = [getattr(t, c) for t in tables]
            if all(p is None for p in parts):
                cols[c] = None
                continue
            if c == "num_candidates" and any(p is None for p in parts):
                raise InvalidInputError("cannot concatenate tables with and without num_candidates")
            fill = {"weight": 1.0}.get(c, -1)
            dtype = next(p.dtype for p in parts if p is not None)
            cols[c] = np.concatenate([p if p is not None else np.full(len(t), fill, dtype) for p, t in zip(parts, tables)])
        return RankTable(**cols)

    # ------------------------------------------------------------------ I/O
    def to_columns(self) -> dict[str, np.ndarray]:
        """The present columns by name (``num_candidates``, ``weight`` and ids only when set)."""
        return {c: getattr(self, c) for c in _COLUMNS if getattr(self, c) is not None}

    def save(self, path: str | os.PathLike) -> Path:
        """Save as ``.npz`` (columnar, exact) or ``.csv``/``.tsv`` (text, with a header);
        :meth:`load` and ``kgeval metrics`` read every file this writes."""
        from .rankfile import write_rank_file

        return write_rank_file(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> RankTable:
        """Load a table written by :meth:`save`, or any CSV/TSV rank file (see :func:`read_rank_file`)."""
        from .rankfile import load_rank_file

        return load_rank_file(path)


def _boolean_mask(mask, shape: tuple) -> np.ndarray:
    """A writable boolean copy of ``mask``; 0/1 integers are accepted, anything else refused
    (``np.asarray(mask, bool)`` would turn 0.5 or the string 'False' into True)."""
    m = to_numpy("candidate_mask", mask)
    if m.shape != shape:
        raise InvalidInputError(f"candidate_mask shape {m.shape} differs from scores shape {shape}")
    if m.dtype.kind != "b":
        if m.dtype.kind not in "iu" or not np.isin(m, (0, 1)).all():
            raise InvalidInputError(f"candidate_mask must hold booleans (or 0/1), got dtype {m.dtype}")
    return m.astype(bool)  # a copy: the caller's mask is never written


def read_rank_file(path: str | os.PathLike) -> RankTable:
    """Read a CSV/TSV rank file with a header; see :func:`kgeval.rankfile.read_rank_file`."""
    from .rankfile import read_rank_file as read

    return read(path)
