"""The rank table: one row per ranking task, the central artifact of kgeval.

Every number kgeval reports is a pure function of a :class:`RankTable`. A row holds

- ``side``: 0 = head prediction ``(?, r, t)``, 1 = tail prediction ``(h, r, ?)``,
  -1 = unspecified (all such rows form one pool, reported as ``both``);
- ``optimistic``: 1 + #(candidates scoring strictly better than the true answer);
- ``pessimistic``: optimistic + #(other candidates tying with the true answer);
- ``num_candidates``: how many candidates were ranked, the true answer included and
  filtered answers excluded (may be absent: then metrics needing it are unavailable);
- ``weight``: a non-negative scaling factor (absent = all ones);
- ``triple_index`` / ``relation``: which evaluation triple and relation the task came
  from (-1 when unknown), filled by the evaluator for breakdowns and macro averages.

Ranks come from counts, never from sorting, so tables from shards simply concatenate.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InvalidInputError

SIDE_HEAD, SIDE_TAIL, SIDE_NONE = 0, 1, -1
SIDE_NAMES = {SIDE_HEAD: "head", SIDE_TAIL: "tail", SIDE_NONE: "both"}
_SIDE_CODES = {"head": SIDE_HEAD, "left": SIDE_HEAD, "tail": SIDE_TAIL, "right": SIDE_TAIL}

_COLUMNS = ("side", "optimistic", "pessimistic", "num_candidates", "weight", "triple_index", "relation")


def _as_1d(name: str, values, dtype=None) -> np.ndarray:
    try:
        arr = np.asarray(values.detach().cpu().numpy() if hasattr(values, "detach") else values)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise InvalidInputError(f"{name}: cannot be converted to an array ({exc})") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise InvalidInputError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    return arr


def _as_int_ranks(name: str, values) -> np.ndarray:
    arr = _as_1d(name, values)
    if arr.dtype.kind not in "iuf":
        raise InvalidInputError(f"{name} must be numeric, got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            bad = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise InvalidInputError(f"{name} contains a non-finite value ({arr[bad]}) at position {bad}")
        if np.any(arr != np.round(arr)):
            bad = int(np.flatnonzero(arr != np.round(arr))[0])
            raise InvalidInputError(
                f"{name} must hold whole numbers, got {arr[bad]} at position {bad} "
                "(pass optimistic and pessimistic ranks, not realistic ones)"
            )
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 1:
        bad = int(np.argmin(arr))
        raise InvalidInputError(f"{name} must be >= 1 (ranks are 1-based), got {arr[bad]} at position {bad}")
    return arr


def side_code(side) -> int:
    """Map ``'head'``/``'tail'`` (or 0/1) to the integer side code."""
    if isinstance(side, str):
        try:
            return _SIDE_CODES[side.strip().lower()]
        except KeyError:
            raise InvalidInputError(f"unknown side {side!r}; expected 'head' or 'tail'") from None
    if side in (SIDE_HEAD, SIDE_TAIL, SIDE_NONE):
        return int(side)
    raise InvalidInputError(f"unknown side {side!r}; expected 'head' or 'tail'")


@dataclass(frozen=True, eq=False)
class RankTable:
    """Columnar table of ranking tasks. Build it with :meth:`from_ranks`, :meth:`from_counts`
    or :meth:`from_scores`; all constructors validate their input."""

    side: np.ndarray
    optimistic: np.ndarray
    pessimistic: np.ndarray
    num_candidates: np.ndarray | None = None
    weight: np.ndarray | None = None
    triple_index: np.ndarray | None = None
    relation: np.ndarray | None = None

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
        ``side`` is one string for all rows, or an array of 'head'/'tail' strings or 0/1 codes.
        """
        if ranks is not None:
            if optimistic is not None or pessimistic is not None:
                raise InvalidInputError("give either ranks= or optimistic=/pessimistic=, not both")
            optimistic = pessimistic = ranks
        if optimistic is None:
            raise InvalidInputError("no ranks given: pass optimistic= (and pessimistic=) or ranks=")
        opt = _as_int_ranks("optimistic ranks", optimistic)
        pes = opt if pessimistic is None else _as_int_ranks("pessimistic ranks", pessimistic)
        n = opt.shape[0]
        if n == 0:
            raise InvalidInputError("empty rank table: at least one ranking task is needed")
        if pes.shape[0] != n:
            raise InvalidInputError(f"length mismatch: {n} optimistic ranks but {pes.shape[0]} pessimistic ranks")
        if np.any(pes < opt):
            bad = int(np.flatnonzero(pes < opt)[0])
            raise InvalidInputError(
                f"pessimistic rank below optimistic rank at position {bad} ({pes[bad]} < {opt[bad]})"
            )
        nc = None
        if num_candidates is not None:
            nc = _as_1d("num_candidates", num_candidates)
            if nc.shape[0] == 1 and n > 1:
                nc = np.repeat(nc, n)
            nc = _as_int_ranks("num_candidates", nc)
            if nc.shape[0] != n:
                raise InvalidInputError(f"length mismatch: {n} ranks but {nc.shape[0]} num_candidates")
            if np.any(pes > nc):
                bad = int(np.flatnonzero(pes > nc)[0])
                raise InvalidInputError(
                    f"rank above its number of candidates at position {bad} "
                    f"(pessimistic rank {pes[bad]} > num_candidates {nc[bad]})"
                )
        w = None
        if weights is not None:
            w = _as_1d("weights", weights).astype(np.float64)
            if w.shape[0] != n:
                raise InvalidInputError(f"length mismatch: {n} ranks but {w.shape[0]} weights")
            if not np.all(np.isfinite(w)):
                raise InvalidInputError("weights contain NaN or infinite values")
            if np.any(w < 0):
                raise InvalidInputError(f"weights must be non-negative, got {w[np.flatnonzero(w < 0)[0]]}")
            if not np.any(w > 0):
                raise InvalidInputError("weights are all zero: at least one task must have positive weight")
        if side is None:
            s = np.full(n, SIDE_NONE, dtype=np.int8)
        elif isinstance(side, (str, int, np.integer)):
            s = np.full(n, side_code(side), dtype=np.int8)
        else:
            arr = _as_1d("side", side)
            if arr.shape[0] != n:
                raise InvalidInputError(f"length mismatch: {n} ranks but {arr.shape[0]} sides")
            if arr.dtype.kind in "iu":
                if not np.all(np.isin(arr, (SIDE_HEAD, SIDE_TAIL, SIDE_NONE))):
                    raise InvalidInputError("side codes must be 0 (head), 1 (tail) or -1 (unspecified)")
                s = arr.astype(np.int8)
            else:
                s = np.array([side_code(str(x)) for x in arr], dtype=np.int8)
        ti = None if triple_index is None else _as_1d("triple_index", triple_index, np.int64)
        rel = None if relation is None else _as_1d("relation", relation, np.int64)
        for name, col in (("triple_index", ti), ("relation", rel)):
            if col is not None and col.shape[0] != n:
                raise InvalidInputError(f"length mismatch: {n} ranks but {col.shape[0]} {name} values")
        return cls(side=s, optimistic=opt, pessimistic=pes, num_candidates=nc, weight=w, triple_index=ti, relation=rel)

    @classmethod
    def from_counts(cls, num_better, num_tied, num_candidates=None, **kwargs) -> RankTable:
        """Build a table from counts: ``optimistic = 1 + num_better``,
        ``pessimistic = optimistic + num_tied`` (``num_tied`` excludes the true answer itself)."""
        better = _as_1d("num_better", num_better, np.int64)
        tied = _as_1d("num_tied", num_tied, np.int64)
        if np.any(better < 0) or np.any(tied < 0):
            raise InvalidInputError("counts of better/tied candidates must be non-negative")
        return cls.from_ranks(1 + better, 1 + better + tied, num_candidates=num_candidates, **kwargs)

    @classmethod
    def from_scores(cls, scores, true_index, *, candidate_mask=None, **kwargs) -> RankTable:
        """Build a table from candidate scores (larger = better), exact float comparison.

        ``scores``: ``(n, m)`` scores of all candidates of each task, the true answer included,
        at column ``true_index[i]``. ``candidate_mask``: optional boolean ``(n, m)``, False for
        candidates that are not ranked (e.g. filtered); the true answer is always ranked.
        """
        s = np.asarray(scores.detach().cpu().numpy() if hasattr(scores, "detach") else scores)
        if s.ndim != 2:
            raise InvalidInputError(f"scores must be a 2-d (tasks, candidates) array, got shape {s.shape}")
        if s.shape[0] == 0 or s.shape[1] == 0:
            raise InvalidInputError(f"scores are empty (shape {s.shape})")
        if np.isnan(s).any():
            row = int(np.flatnonzero(np.isnan(s).any(axis=1))[0])
            raise InvalidInputError(f"scores contain NaN (first in task {row})")
        idx = _as_1d("true_index", true_index, np.int64)
        if idx.shape[0] != s.shape[0]:
            raise InvalidInputError(f"length mismatch: {s.shape[0]} score rows but {idx.shape[0]} true indices")
        if np.any((idx < 0) | (idx >= s.shape[1])):
            raise InvalidInputError(f"true_index out of range [0, {s.shape[1]})")
        rows = np.arange(s.shape[0])
        true = s[rows, idx][:, None]
        mask = np.ones(s.shape, dtype=bool) if candidate_mask is None else np.asarray(candidate_mask, dtype=bool).copy()
        if mask.shape != s.shape:
            raise InvalidInputError(f"candidate_mask shape {mask.shape} differs from scores shape {s.shape}")
        mask[rows, idx] = False  # count the true answer separately
        better = ((s > true) & mask).sum(axis=1)
        tied = ((s == true) & mask).sum(axis=1)
        return cls.from_counts(better, tied, num_candidates=mask.sum(axis=1) + 1, **kwargs)

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return int(self.optimistic.shape[0])

    def __repr__(self) -> str:
        sides = ", ".join(f"{SIDE_NAMES[c]}={int((self.side == c).sum())}" for c in np.unique(self.side))
        return f"RankTable({len(self)} tasks: {sides}; candidates={'yes' if self.num_candidates is not None else 'no'})"

    @property
    def sides(self) -> list[str]:
        """Names of the sides present (``head``/``tail``); empty when sides are unspecified."""
        return [SIDE_NAMES[c] for c in (SIDE_HEAD, SIDE_TAIL) if np.any(self.side == c)]

    def subset(self, mask) -> RankTable:
        """Rows where ``mask`` (boolean array or index array) selects."""
        m = np.asarray(mask)
        take = lambda a: None if a is None else a[m]  # noqa: E731
        out = RankTable(**{c: take(getattr(self, c)) for c in _COLUMNS})
        if len(out) == 0:
            raise InvalidInputError("the selection leaves no ranking task")
        return out

    def select_side(self, side: str) -> RankTable:
        """Tasks of one side; ``'both'`` returns all tasks."""
        if side == "both":
            return self
        return self.subset(self.side == side_code(side))

    def ranks(self, rank_type: str) -> np.ndarray:
        """Rank array for ``optimistic``, ``pessimistic`` or ``realistic`` (their mean, as PyKEEN)."""
        if rank_type == "optimistic":
            return self.optimistic.astype(np.float64)
        if rank_type == "pessimistic":
            return self.pessimistic.astype(np.float64)
        if rank_type == "realistic":
            return 0.5 * (self.optimistic + self.pessimistic).astype(np.float64)
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
        return {c: getattr(self, c) for c in _COLUMNS if getattr(self, c) is not None}

    def save(self, path: str | os.PathLike) -> Path:
        """Save as ``.npz`` (columnar, exact) or ``.csv``/``.tsv`` (text, with a header)."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".npz":
            np.savez_compressed(path, **self.to_columns())
        elif suffix in (".csv", ".tsv"):
            cols = self.to_columns()
            delim = "," if suffix == ".csv" else "\t"
            with open(path, "w", newline="") as fh:
                w = csv.writer(fh, delimiter=delim)
                w.writerow(cols)
                names = list(cols)
                for i in range(len(self)):
                    row = []
                    for c in names:
                        v = cols[c][i]
                        row.append(SIDE_NAMES[int(v)] if c == "side" else (repr(float(v)) if c == "weight" else int(v)))
                    w.writerow(row)
        else:
            raise InvalidInputError(f"unknown rank-table format {path.suffix!r}: use .npz, .csv or .tsv")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> RankTable:
        """Load a table written by :meth:`save` (or any CSV/TSV rank file, see :func:`read_rank_file`)."""
        path = Path(path)
        if not path.exists():
            raise InvalidInputError(f"rank file not found: {path}")
        if path.suffix.lower() == ".npz":
            try:
                with np.load(path, allow_pickle=False) as data:
                    cols = {c: data[c] for c in _COLUMNS if c in data.files}
            except Exception as exc:
                raise InvalidInputError(f"{path}: not a readable rank table ({exc})") from None
            if "optimistic" not in cols:
                raise InvalidInputError(f"{path}: no 'optimistic' column")
            return cls.from_ranks(
                cols["optimistic"],
                cols.get("pessimistic"),
                num_candidates=cols.get("num_candidates"),
                side=cols.get("side"),
                weights=cols.get("weight"),
                triple_index=cols.get("triple_index"),
                relation=cols.get("relation"),
            )
        return read_rank_file(path)


def read_rank_file(path: str | os.PathLike) -> RankTable:
    """Read a CSV/TSV rank file with a header.

    Columns: ``optimistic`` and ``pessimistic`` (or a single ``rank``), optional
    ``num_candidates``, ``side`` (head/tail), ``weight``, ``triple_index``, ``relation``.
    The delimiter is sniffed (comma, tab, semicolon or whitespace).
    """
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"rank file not found: {path}")
    text = path.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise InvalidInputError(f"{path}: the rank file is empty")
    header_line = lines[0]
    delim = "\t" if "\t" in header_line else ("," if "," in header_line else (";" if ";" in header_line else None))
    split = (lambda s: s.split(delim)) if delim else (lambda s: s.split())
    header = [h.strip().lower() for h in split(header_line)]
    aliases = {"weights": "weight", "candidates": "num_candidates", "ranks": "rank"}
    header = [aliases.get(h, h) for h in header]
    known = {"optimistic", "pessimistic", "rank", "num_candidates", "side", "weight", "triple_index", "relation"}
    unknown = [h for h in header if h not in known]
    if unknown:
        raise InvalidInputError(
            f"{path}: unknown column(s) {unknown} in the header; expected some of {sorted(known)}"
        )
    if "rank" not in header and "optimistic" not in header:
        raise InvalidInputError(f"{path}: the header needs an 'optimistic' (and 'pessimistic') or a 'rank' column")
    data: dict[str, list] = {h: [] for h in header}
    for lineno, line in enumerate(lines[1:], start=2):
        fields = [f.strip() for f in split(line)]
        if len(fields) != len(header):
            raise InvalidInputError(
                f"{path}, line {lineno}: expected {len(header)} fields, got {len(fields)}: {line!r}"
            )
        for h, f in zip(header, fields):
            if h == "side":
                data[h].append(f)
                continue
            try:
                data[h].append(float(f))
            except ValueError:
                raise InvalidInputError(f"{path}, line {lineno}: column {h!r} is not a number: {f!r}") from None
    if not data[header[0]]:
        raise InvalidInputError(f"{path}: the rank file has a header but no rows")
    try:
        return RankTable.from_ranks(
            data.get("optimistic"),
            data.get("pessimistic"),
            ranks=data.get("rank"),
            num_candidates=data.get("num_candidates"),
            side=data.get("side"),
            weights=data.get("weight"),
            triple_index=data.get("triple_index"),
            relation=data.get("relation"),
        )
    except InvalidInputError as exc:
        raise InvalidInputError(f"{path}: {exc}") from None


def concat(tables: Iterable[RankTable]) -> RankTable:
    """Concatenate rank tables; see :meth:`RankTable.concat`."""
    return RankTable.concat(list(tables))
