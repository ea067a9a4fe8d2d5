"""The performance knobs of one evaluation: :class:`Tuning`, one explicit frozen object (kernel, walkers,
block sizes), read from the environment only by :meth:`Tuning.from_env`. No knob changes a rank."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from .._validation import check_positive_int
from ..errors import InvalidInputError

__all__ = ["Tuning", "as_tuning"]

_KERNEL_MODES = ("auto", "numba", "torch")


@dataclass(frozen=True)
class Tuning:
    """Every internal performance knob of one evaluation, in one frozen object.

    None of them changes a rank (every path is exact and compared with the others by the tests);
    they change speed and memory only. ``evaluate(..., tuning=Tuning(...))`` passes one explicitly;
    by default :meth:`from_env` builds one, once per evaluation, and it is the only place in the
    engine that reads ``os.environ``. Measurements behind the values are in
    ``benchmarks/results/evaluation-notes.md``.

    Parameters
    ----------
    kernel, kernel_min_pairs, workers, bookkeeping_threads, ...:
        the fields below, each documented where it is declared; every size is a positive integer.

    Examples
    --------
    >>> import numpy as np
    >>> from kgeval.evaluation import FunctionScorer, Tuning, evaluate_ranks
    >>> scorer = FunctionScorer(lambda h, r, t: (h * t % 5) * 1.0, 8, num_relations=1)
    >>> test = np.array([[1, 0, 2], [3, 0, 4]])
    >>> a = evaluate_ranks(scorer, test, progress=False, tuning=Tuning(kernel="torch"))
    >>> b = evaluate_ranks(scorer, test, progress=False, tuning=Tuning(kernel="numba", workers=1))
    >>> bool((a.rank_table.optimistic == b.rank_table.optimistic).all())
    True
    >>> Tuning.from_env({"KGEVAL_CHUNK_WORKERS": "2"}).workers
    2
    """

    #: counting back end: ``"auto"`` (the compiled kernel when this evaluation scores at least
    #: ``kernel_min_pairs`` pairs on the CPU, or when it is already loaded), ``"numba"`` (always on the
    #: CPU) or ``"torch"`` (the reference path). Decided once at the start: never switched mid-run.
    kernel: str = "auto"
    #: under ``"auto"`` an evaluation this large loads the kernel (~0.5 s of importing numba, paid back
    #: within the evaluation from about here on); smaller ones load it only when warmed (:func:`warm_kernel`)
    kernel_min_pairs: int = 1 << 27
    #: threads walking a batch's parts (row groups, column chunks) on the CPU; None = torch's thread count,
    #: 1 = one walker on the caller's threads
    workers: int | None = None
    #: torch threads for the memory-bound bookkeeping (filter lookups, masking, counting); None keeps
    #: torch's count. 1: on a loaded machine a parallel region stalls on any descheduled OpenMP thread
    bookkeeping_threads: int | None = 1
    #: automatic chunking starts when the budget holds fewer whole rows than this
    min_chunk_rows: int = 64
    #: ... and then aims at this many query rows per batch (fewer passes over the entity table)
    chunk_rows: int = 512
    #: pass 1 of chunked batches scores at least this many columns (very narrow products round another way)
    min_true_columns: int = 64
    #: one walker's whole-row score block on the CPU, in entries (8 MiB of float32: cache-friendly, reused)
    cpu_block: int = 1 << 21
    #: ... a chunked block (4 MiB), as ``cpu_block_rows`` query rows x 1,024 entities
    cpu_chunk_block: int = 1 << 20
    #: query rows of an automatic CPU chunk
    cpu_block_rows: int = 1024
    #: whole rows up to this many candidate columns (scored in row groups of one block); wider rows are
    #: chunked: from here on 1,024 x 1,024 chunks with a scored pass 1 beat aligned whole-row tiles
    #: (FB15k-237, 14,541 entities: see benchmarks/results/evaluation-notes.md)
    cpu_whole_cols: int = 1 << 12
    #: a whole-row batch holds up to this many row groups per walker (per-batch work paid once for all)
    whole_batch_blocks: int = 16
    #: whole local rows of an entity shard, scored in one piece: fewer batches, each paying three collectives
    shard_row_block: int = 1 << 23
    #: unaligned whole rows (length not a multiple of 16 floats) are scored in tiles of about this width
    tile_cols: int = 4096
    #: ... a multiple of this many columns (products into unaligned rows are slow)
    tile_align: int = 128
    #: automatic CPU chunk widths are a multiple of this many columns (same reason)
    cpu_chunk_align: int = 64
    #: row groups hold at least this many query rows
    min_walker_rows: int = 16
    #: a batch of automatic CPU chunks holds up to this many row blocks, walked as one (one setup per
    #: batch); more than one made the scored pass 1 slower than the setup it saves (FB15k-237, WN18RR)
    row_blocks: int = 1

    def __post_init__(self):
        if self.kernel not in _KERNEL_MODES:
            raise InvalidInputError(f"Tuning.kernel must be 'auto', 'numba' or 'torch', got {self.kernel!r}")
        if self.workers is not None:
            check_positive_int("Tuning.workers", self.workers)
        if self.bookkeeping_threads is not None:
            check_positive_int("Tuning.bookkeeping_threads", self.bookkeeping_threads)
        for f in dataclasses.fields(self):
            if f.name not in ("kernel", "workers", "bookkeeping_threads"):
                check_positive_int(f"Tuning.{f.name}", getattr(self, f.name))

    def replace(self, **changes) -> Tuning:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping | None = None) -> Tuning:
        """The defaults, overridden by the environment (``os.environ`` unless ``environ`` is given):

        - ``KGEVAL_COUNT_KERNEL``: ``auto`` / ``numba`` / ``torch`` (:attr:`kernel`);
        - ``KGEVAL_CHUNK_WORKERS``: a positive count of walkers (:attr:`workers`; 1 = off);
        - ``KGEVAL_BOOKKEEPING_THREADS``: a positive count, or 0 for torch's own (:attr:`bookkeeping_threads`).

        An invalid value is an :class:`~kgeval.errors.InvalidInputError` naming the variable.
        """
        if environ is None:
            import os

            environ = os.environ
        changes: dict = {}
        mode = environ.get("KGEVAL_COUNT_KERNEL", "").strip().lower()
        if mode:
            if mode not in _KERNEL_MODES:
                raise InvalidInputError(f"KGEVAL_COUNT_KERNEL must be 'auto', 'numba' or 'torch', got {mode!r}")
            changes["kernel"] = mode
        workers = _env_count(environ, "KGEVAL_CHUNK_WORKERS", minimum=1)
        if workers is not None:
            changes["workers"] = workers
        book = _env_count(environ, "KGEVAL_BOOKKEEPING_THREADS", minimum=0)
        if book is not None:
            changes["bookkeeping_threads"] = book or None
        return cls(**changes)


def _env_count(environ: Mapping, name: str, *, minimum: int) -> int | None:
    """The integer in ``environ[name]``, None when unset or empty; below ``minimum`` or not an integer:
    a named error."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = minimum - 1
    if n < minimum:
        kind = "non-negative" if minimum == 0 else "positive"
        raise InvalidInputError(f"{name} must be a {kind} integer, got {raw!r}")
    return n


def as_tuning(tuning) -> Tuning:
    """``tuning`` as a :class:`Tuning`: None = :meth:`Tuning.from_env` (read now)."""
    if tuning is None:
        return Tuning.from_env()
    if isinstance(tuning, Tuning):
        return tuning
    raise InvalidInputError(f"tuning must be a Tuning or None, got {type(tuning).__name__}")
