"""The streaming, filtered link-prediction evaluator.

For every evaluation triple ``(h, r, t)`` and side, the true answer's score ``s`` is compared with
every candidate's score in one score row:

    better = #{c : score(c) > s},   tied = #{c : score(c) == s} - 1   (the answer itself)
    optimistic = 1 + better,        pessimistic = optimistic + tied

(with ``tie_tolerance = tol > 0``: ``better = #{score > s + tol}``, ``tied`` counts
``|score - s| <= tol``). Filtering subtracts the contributions of the other known answers of
the query, gathered from the score matrix through the CSR :class:`FilterIndex`; so
``num_candidates = #allowed entities - #other known answers among them`` (the true answer counts).

Work streams over batches of unique queries (one score row per query, shared by all tasks of
that query), head tasks through ``score_heads`` and tail tasks through ``score_tails``. The
batch size follows a memory budget, and halves on out-of-memory errors, resuming at the failed
batch.

Entity chunks: when even a small batch of whole rows would exceed the budget (or when
``entity_chunk_size`` is given), each query batch is scored in column chunks ``[q, chunk]``
through the scorer's ``entities=`` keyword (a ``slice``, or the allowed ids of a restriction).
``better`` / ``tied`` add exactly over chunks and the filter masking is applied per chunk (the
CSR answers falling in the chunk's column range). The true scores are read from the very chunk
that holds the answer (a first pass over the chunks holding answers), so they are bitwise the
values compared against. Chunked batches therefore score those chunks twice. A scorer without
the ``entities=`` keyword cannot be chunked: whole rows are scored as without chunking (with a
warning). Query-level metrics need whole rows: they are refused with an explicit
``entity_chunk_size`` and disable automatic chunking.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import InvalidInputError
from ..protocol import EvaluationProtocol, FilterSet, Sampling
from ..ranks import SIDE_HEAD, SIDE_NAMES, SIDE_TAIL, RankTable, side_code
from ..triples import as_triples, check_ids
from .options import EvaluationOptions
from .filter_index import FilterIndex, answer_column, query_keys, sorted_unique
from .query_metrics import QueryMetricAccumulator, expected_hits
from .sampling import sample_negatives
from .scorers import accepts_entities, as_scorer

_DEFAULT_BUDGET_CAP = 1 << 30  # 1 GiB


# ---------------------------------------------------------------------------- input checks
def _as_id_set(name: str, ids: tuple[int, ...], limit: int, what: str) -> np.ndarray:
    """The (sorted, distinct, non-negative) ids of a restriction, range-checked against ``limit``."""
    arr = np.asarray(ids, dtype=np.int64)
    if arr[-1] >= limit:
        raise InvalidInputError(f"{name}: {what} id {int(arr[-1])} is out of range [0, {limit})")
    return arr


def _filter_sets(filter_triples) -> list[tuple[str, object]]:
    if filter_triples is None:
        return []
    if isinstance(filter_triples, Mapping):
        return [(str(k), v) for k, v in filter_triples.items()]
    if isinstance(filter_triples, (np.ndarray, torch.Tensor)):
        return [("filter_triples", filter_triples)]
    items = list(filter_triples)
    if not items:
        return []
    # a single list of 3 ints per row also counts as one array
    if all(isinstance(x, (list, tuple)) and len(x) == 3 and all(isinstance(v, (int, np.integer)) for v in x) for x in items):
        return [("filter_triples", np.asarray(items))]
    return [(f"filter_triples[{i}]", x) for i, x in enumerate(items)]


def available_memory_bytes(device: torch.device | None = None) -> int | None:
    """Free memory on ``device``: CUDA free memory, else MemAvailable (psutil or /proc/meminfo)."""
    if device is not None and device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:
            return None
    try:
        import psutil  # optional

        return int(psutil.virtual_memory().available)
    except Exception:
        pass
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def default_memory_budget(device: torch.device | None = None) -> int:
    """``min(1 GiB, available / 4)``: a safe share for the score matrix and its temporaries."""
    avail = available_memory_bytes(device)
    if avail is None:
        return _DEFAULT_BUDGET_CAP // 2
    return int(max(16 << 20, min(_DEFAULT_BUDGET_CAP, avail // 4)))


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


class _Threads:
    """Set torch's intra-op thread count inside a ``with`` block (restored afterwards)."""

    def __init__(self, n: int | None):
        self.n = n

    def __enter__(self):
        self.prev = torch.get_num_threads()
        if self.n is not None and self.n != self.prev:
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        if torch.get_num_threads() != self.prev:
            torch.set_num_threads(self.prev)
        return False


# ---------------------------------------------------------------------------- output
@dataclass
class EvaluationOutput:
    """What :func:`evaluate_ranks` computes: the rank table, the protocol and extra metrics."""

    rank_table: RankTable
    protocol: EvaluationProtocol
    extra: dict[str, float] = field(default_factory=dict)
    sampled_negatives: dict[str, np.ndarray] | None = None


@dataclass
class _SideResult:
    triple_index: list = field(default_factory=list)
    better: list = field(default_factory=list)
    tied: list = field(default_factory=list)
    ncand: list = field(default_factory=list)


class _Context:
    """Per-evaluation state shared by the batch routines."""

    def __init__(self, **kw):
        self.__dict__.update(kw)
        self.checked = 0
        self.mismatches = 0
        self.shape_checked = set()
        self.buf = None


# ---------------------------------------------------------------------------- main entry
def evaluate_ranks(scorer, triples, *, filter_triples=(), options: EvaluationOptions | None = None,
                   **overrides) -> EvaluationOutput:
    """Rank every evaluation task; see :func:`kgeval.evaluation.evaluate` for the arguments."""
    opts = options if options is not None else EvaluationOptions()
    if overrides:
        opts = opts.replace(**overrides)
    return run_evaluation(scorer, triples, filter_triples, opts)


def run_evaluation(scorer, triples, filter_triples, opts: EvaluationOptions) -> EvaluationOutput:
    """The evaluation of ``triples`` under ``opts``."""
    scorer = as_scorer(scorer)
    num_entities = getattr(scorer, "num_entities", None)
    if not isinstance(num_entities, (int, np.integer)) or isinstance(num_entities, bool) or num_entities <= 0:
        raise InvalidInputError(f"the scorer must have a positive integer num_entities, got {num_entities!r}")
    num_entities = int(num_entities)
    side_codes = [side_code(s) for s in opts.sides]
    for c in side_codes:
        meth = "score_heads" if c == SIDE_HEAD else "score_tails"
        if not callable(getattr(scorer, meth, None)):
            raise InvalidInputError(f"the scorer has no {meth}() method, needed for {SIDE_NAMES[c]} prediction")
    filtered, macro, num_negatives, seed = opts.filtered, opts.macro, opts.num_negatives, opts.seed
    tol, nan_policy, check_consistency = opts.tie_tolerance, opts.nan_policy, opts.check_consistency
    batch_size, memory_budget, entity_chunk_size = opts.batch_size, opts.memory_budget, opts.entity_chunk_size
    ks, num_relations, device, progress = opts.query_metrics_k, opts.num_relations, opts.device, opts.progress
    restrict_entities, restrict_relations = opts.restrict_entities, opts.restrict_relations

    tri = as_triples("triples", triples, allow_empty=False)
    fsets = [(name, as_triples(name, arr, allow_empty=True)) for name, arr in _filter_sets(filter_triples)]
    if num_relations is None:
        num_relations = getattr(scorer, "num_relations", None)
    rel_limit = int(num_relations) if num_relations is not None else None
    check_ids("triples", tri, num_entities, rel_limit)
    for name, arr in fsets:
        check_ids(name, arr, num_entities, rel_limit)
    if rel_limit is None:
        rel_limit = int(max([int(tri[:, 1].max())] + [int(a[:, 1].max()) for _, a in fsets if a.shape[0]])) + 1

    keep = np.ones(tri.shape[0], dtype=bool)
    ent_allowed = rel_allowed = None
    if restrict_entities is not None:
        ent_allowed = _as_id_set("restrict_entities", restrict_entities, num_entities, "entity")
        keep &= np.isin(tri[:, 0], ent_allowed) & np.isin(tri[:, 2], ent_allowed)
    if restrict_relations is not None:
        rel_allowed = _as_id_set("restrict_relations", restrict_relations, rel_limit, "relation")
        keep &= np.isin(tri[:, 1], rel_allowed)
    if not keep.any():
        raise InvalidInputError(
            "the restriction excludes every evaluation triple "
            f"({tri.shape[0]} triples, restrict_entities={None if ent_allowed is None else ent_allowed.size} ids, "
            f"restrict_relations={None if rel_allowed is None else rel_allowed.size} ids)"
        )
    if ent_allowed is not None and ent_allowed.size == num_entities:
        ent_allowed = None  # restricting to everything is no restriction

    if device is None:
        device = getattr(scorer, "device", None)
    device = torch.device(device) if device is not None else torch.device("cpu")

    known = np.concatenate([tri] + [a for _, a in fsets], axis=0)
    universe = ent_allowed if ent_allowed is not None else np.arange(num_entities, dtype=np.int64)
    ctx = _Context(
        scorer=scorer,
        num_entities=num_entities,
        num_relations=rel_limit,
        device=device,
        tol=tol,
        nan_policy=nan_policy,
        check_consistency=check_consistency,
        allowed=None if ent_allowed is None else torch.as_tensor(ent_allowed, device=device),
        pos_map=None,
        num_columns=int(universe.shape[0]),
        entity_chunk_size=None if entity_chunk_size is None else int(entity_chunk_size),
        chunk_used=None,
        want_query_metrics=bool(ks) and num_negatives is None,
        score_threads=torch.get_num_threads(),
    )
    if ent_allowed is not None:
        pos_map = torch.full((num_entities,), -1, dtype=torch.long, device=device)
        pos_map[ctx.allowed] = torch.arange(ent_allowed.shape[0], device=device)
        ctx.pos_map = pos_map

    budget = int(memory_budget) if memory_budget is not None else default_memory_budget(device)
    qacc = QueryMetricAccumulator(ks) if (ks and num_negatives is None) else None
    eval_idx = np.flatnonzero(keep)
    total_tasks = eval_idx.shape[0] * len(side_codes)

    from tqdm.auto import tqdm

    bar = tqdm(total=total_tasks, unit="task", desc="Evaluating", disable=not progress, leave=False)
    tables, sampled = [], {}
    capped_tasks = 0
    used_candidates_method = False
    try:
        with torch.inference_mode(), _Threads(_BOOKKEEPING_THREADS):
            for side in side_codes:
                index = FilterIndex(known, side=side, num_entities=num_entities, num_relations=rel_limit, device=device) if filtered else None
                sub = tri[eval_idx]
                keys = query_keys(sub, side, rel_limit)
                answers = answer_column(sub, side).astype(np.int64)
                if num_negatives is None:
                    res = _rank_full(ctx, side, sub, eval_idx, keys, answers, index, batch_size, budget, bar, qacc)
                else:
                    negs, counts = sample_negatives(
                        keys, answers, num_negatives=int(num_negatives), seed=seed, side=side, universe=universe,
                        index=index if filtered else None,
                    )
                    capped_tasks += int((counts < num_negatives).sum())
                    sampled[SIDE_NAMES[side]] = negs
                    res, used_candidates_method = _rank_sampled(ctx, side, sub, eval_idx, negs, batch_size, budget, bar)
                ti = np.concatenate(res.triple_index)
                order = np.argsort(ti, kind="stable")
                weights = None
                if macro:
                    _, inv, cnt = np.unique(keys, return_inverse=True, return_counts=True)
                    weights = 1.0 / cnt[inv]
                    # keys are in eval_idx order; the table rows are sorted by triple index as well
                tables.append(
                    RankTable.from_counts(
                        np.concatenate(res.better)[order],
                        np.concatenate(res.tied)[order],
                        np.concatenate(res.ncand)[order],
                        side=side,
                        triple_index=ti[order],
                        relation=tri[ti[order], 1],
                        weights=weights,
                    )
                )
    finally:
        bar.close()
    if capped_tasks:
        warnings.warn(
            f"{capped_tasks} task(s) have fewer than num_negatives={num_negatives} available negatives; "
            "they use all available ones (num_candidates = 1 + available)",
            stacklevel=3,
        )
    if ctx.mismatches:
        warnings.warn(ctx.first_mismatch + f" ({ctx.mismatches} of {ctx.checked} checked tasks differ)", stacklevel=3)

    table = RankTable.concat(tables)
    # = the number of (query, answer) pairs of either side's filter index: unique known triples
    num_known = int(sorted_unique(known[:, 0] * (rel_limit * num_entities) + known[:, 1] * num_entities + known[:, 2]).shape[0]) if filtered else 0
    protocol = EvaluationProtocol(
        sides=tuple(SIDE_NAMES[c] for c in side_codes),
        filtered=filtered,
        filter_sets=(FilterSet("evaluation", int(tri.shape[0])), *(FilterSet(n, int(a.shape[0])) for n, a in fsets))
        if filtered else (),
        num_known_triples=num_known if filtered else None,
        num_triples=int(tri.shape[0]),
        num_evaluated_triples=int(eval_idx.shape[0]),
        num_tasks=len(table),
        num_entities=num_entities,
        num_relations=rel_limit,
        restrict_entities=None if ent_allowed is None else int(ent_allowed.size),
        restrict_relations=None if rel_allowed is None else int(rel_allowed.size),
        num_triples_dropped=int((~keep).sum()),
        sampling=None if num_negatives is None else Sampling(
            num_negatives=int(num_negatives), seed=int(seed),
            excludes="known true answers" if filtered else "the true answer", capped_tasks=capped_tasks,
            scoring="candidates method" if used_candidates_method else "full rows, gathered"),
        macro=macro,
        tie_tolerance=tol,
        nan_policy=nan_policy,
        candidates=(
            "1 + sampled negatives" if num_negatives is not None
            else "allowed entities" + (" minus the other known true answers of the query" if filtered else "")
            + "; the true answer counted"
        ),
        query_metrics_k=ks if qacc is not None else (),
        consistency_checked=ctx.checked if check_consistency else None,
        consistency_mismatches=ctx.mismatches if check_consistency else None,
        entity_chunk_size=ctx.chunk_used,
        device=str(device),
    )
    extra = qacc.to_flat_dict() if qacc is not None else {}
    return EvaluationOutput(table, protocol, extra, sampled or None)


# ---------------------------------------------------------------------------- scoring helpers
def _score_rows(ctx: _Context, side: int, ent: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
    """Scores of all allowed entities for each query ``(ent, rel)``: ``(b, num_columns)``."""
    s = ctx.scorer
    meth = s.score_heads if side == SIDE_HEAD else s.score_tails
    args = (rel, ent) if side == SIDE_HEAD else (ent, rel)
    with _Threads(ctx.score_threads):
        if ctx.allowed is not None and accepts_entities(meth):
            out = meth(*args, entities=ctx.allowed)
            expected_cols = ctx.num_columns
        else:
            out = meth(*args)
            expected_cols = ctx.num_entities
    key = (side, "rows")
    if key not in ctx.shape_checked:
        _check_output(out, (ent.shape[0], expected_cols), meth.__name__)
        ctx.shape_checked.add(key)
    if ctx.allowed is not None and expected_cols == ctx.num_entities:
        out = out.index_select(1, ctx.allowed)
    return out


def _score_chunk(ctx: _Context, side: int, ent: torch.Tensor, rel: torch.Tensor, c0: int, c1: int) -> torch.Tensor:
    """Scores of the allowed entities at column positions ``[c0, c1)``: ``(b, c1 - c0)``."""
    s = ctx.scorer
    meth = s.score_heads if side == SIDE_HEAD else s.score_tails
    args = (rel, ent) if side == SIDE_HEAD else (ent, rel)
    entities = slice(c0, c1) if ctx.allowed is None else ctx.allowed[c0:c1]
    with _Threads(ctx.score_threads):
        out = meth(*args, entities=entities)
    key = (side, "chunk", c1 - c0)
    if key not in ctx.shape_checked:
        _check_output(out, (ent.shape[0], c1 - c0), meth.__name__)
        ctx.shape_checked.add(key)
    return out


def _check_output(out, shape, name: str):
    if not isinstance(out, torch.Tensor):
        raise InvalidInputError(f"scorer.{name} must return a torch.Tensor, got {type(out).__name__}")
    if not out.is_floating_point():
        raise InvalidInputError(f"scorer.{name} must return floating-point scores, got dtype {out.dtype}")
    if tuple(out.shape) != tuple(shape):
        raise InvalidInputError(f"scorer.{name} returned shape {tuple(out.shape)}, expected {tuple(shape)}")


def _score_alone(ctx: _Context, side: int, h: int, r: int, t: int) -> float:
    """The score of one triple computed on its own (for the consistency check)."""
    s = ctx.scorer
    dev = ctx.device
    hh, rr, tt = (torch.tensor([x], device=dev) for x in (h, r, t))
    # models with inverse relations score head prediction (?, r, t) as the tail prediction
    # (t, r⁻¹, ?): a genuinely different number from score_triples(h, r, t), so compare rows
    inverse_head = side == SIDE_HEAD and bool(getattr(s, "inverse_relations", False))
    if callable(getattr(s, "score_triples", None)) and not inverse_head:
        return float(s.score_triples(hh, rr, tt).reshape(-1)[0])
    if side == SIDE_TAIL:
        row = s.score_tails(hh, rr)
        return float(row.reshape(-1)[t])
    row = s.score_heads(rr, tt)
    return float(row.reshape(-1)[h])


def _consistency(ctx: _Context, side: int, sub_rows: np.ndarray, true: torch.Tensor, picks, scale=None):
    # the absolute tolerance follows the score scale (``scale``: mean |score| of the checked
    # rows, else the batch's mean |true score|): a score that cancels to near zero legitimately
    # differs by float32 rounding of its large terms (measured: DistMult dim 200 gave
    # 0.29939365 in a 64-row batch vs 0.29939747 alone)
    if scale is None:
        scale = float(torch.nan_to_num(true.abs().double(), nan=0.0, posinf=0.0).mean()) if true.numel() else 0.0
    abs_tol = max(1e-6, 1e-5 * scale)
    for j in picks:
        h, r, t = (int(x) for x in sub_rows[j])
        alone = _score_alone(ctx, side, h, r, t)
        inbatch = float(true[j])
        ctx.checked += 1
        same = (math.isnan(alone) and math.isnan(inbatch)) or alone == inbatch or math.isclose(
            alone, inbatch, rel_tol=1e-5, abs_tol=abs_tol
        )
        if not same:
            ctx.mismatches += 1
            if ctx.mismatches == 1:
                ctx.first_mismatch = (
                    f"consistency check failed: triple ({h}, {r}, {t}) scores {inbatch!r} inside a batch "
                    f"({SIDE_NAMES[side]} prediction) but {alone!r} alone; scores depend on the batch "
                    "(dropout or batch norm in training mode?)"
                )


def _count(scores: torch.Tensor, true: torch.Tensor, tol: float, buf: torch.Tensor | None = None):
    """``(#scores > true, #scores tied with true)`` per row; ``true`` broadcasts against ``scores``.

    NaN entries compare neither greater nor equal, so they count in neither. The comparisons
    write into a float buffer and are summed as floats: summing a bool tensor is ~10x slower in
    torch on CPU. Float sums of 0/1 are exact below 2**24 columns (float64 is used beyond).
    """
    dtype = torch.float32 if scores.shape[-1] < (1 << 24) else torch.float64
    if buf is None or buf.dtype != dtype or buf.numel() < scores.numel():
        buf = torch.empty(scores.shape, dtype=dtype, device=scores.device)
    else:
        buf = buf.view(-1)[: scores.numel()].view(scores.shape)
    if tol == 0:
        better = torch.gt(scores, true, out=buf).sum(-1)
        tied = torch.eq(scores, true, out=buf).sum(-1)
    else:
        better = torch.gt(scores, true + tol, out=buf).sum(-1)
        tied = torch.ge(scores, true - tol, out=buf).sum(-1) - better  # t - tol <= s <= t + tol
    return better.long(), tied.long()


def _nan_check(ctx, side, scores, true, rows_triples, task_q):
    """Raise on NaN (policy 'raise'), naming the first offending triple and side."""
    if ctx.nan_policy != "raise":
        return
    suspicious = torch.isnan(scores.sum(1))  # a NaN anywhere makes the row sum NaN (or inf - inf)
    if not bool(suspicious.any()) and not bool(torch.isnan(true).any()):
        return
    bad_rows = torch.isnan(scores).any(1)
    bad_tasks = bad_rows[task_q] | torch.isnan(true)
    if bool(bad_tasks.any()):
        j = int(bad_tasks.nonzero()[0])
        h, r, t = (int(x) for x in rows_triples[j])
        raise InvalidInputError(
            f"NaN scores for triple {j} of the batch ({h}, {r}, {t}), {SIDE_NAMES[side]} prediction; "
            "pass nan_policy='worst' to rank NaN scores last"
        )


def _grow(buf, numel: int, device):
    """A reusable flat float32 buffer of at least ``numel`` elements (allocated once, not per batch)."""
    if buf is None or buf.numel() < numel:
        return torch.empty(numel, dtype=torch.float32, device=device)
    return buf


def _auto_batch(budget: int, columns: int, n_tasks: int, itemsize: int = 4) -> int:
    # score matrix + a gathered/restricted copy + the float comparison buffer, per task row
    # (batches hold whole queries, so a batch may exceed its task count by one query's tasks)
    per_row = columns * (3 * itemsize + 2) + 256
    return int(max(1, min(n_tasks, budget // per_row)))


def _run_batches(n: int, bs: int, step, bar):
    """Call ``step(start, stop)`` over ``[0, n)``, halving the batch on out-of-memory errors and
    resuming at the failed batch (finished batches are never redone)."""
    start = 0
    while start < n:
        stop = min(n, start + bs)
        try:
            done = step(start, stop)
        except Exception as exc:  # noqa: BLE001 - re-raised unless it is an OOM
            if not _is_oom(exc) or bs == 1:
                raise
            bs = max(1, bs // 2)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            warnings.warn(f"out of memory: retrying with batch size {bs}", stacklevel=2)
            continue
        bar.update(done)
        start = stop
    return bs


# ---------------------------------------------------------------------------- full ranking
_MIN_CHUNK_ROWS = 64  # automatic chunking keeps at least this many query rows per batch
_BLOCK_ELEMS = 1 << 18  # scores per counting block (1 MiB of float32: the buffer stays in cache)
# intra-op threads for everything but the scorer calls (filter lookups, masking, counting):
# these are memory-bound passes, and on a loaded machine every parallel region can stall on a
# descheduled OpenMP thread (measured: 330 small blocks took 10 s with 2 threads, 0.04 s with 1)
# (KGEVAL_BOOKKEEPING_THREADS=n overrides; 0 = keep torch's setting). The scorer calls keep the
# caller's thread count.
_BOOKKEEPING_THREADS = int(os.environ.get("KGEVAL_BOOKKEEPING_THREADS", "1")) or None


def _plan_chunks(ctx, side, budget, batch_size, n_tasks) -> tuple[int, int | None]:
    """``(batch size in tasks, entity chunk width or None)`` for full ranking."""
    ncols = ctx.num_columns
    meth = ctx.scorer.score_heads if side == SIDE_HEAD else ctx.scorer.score_tails
    width = ctx.entity_chunk_size
    if width is None and not ctx.want_query_metrics:
        # automatic: chunk when the budget does not hold a small batch of whole rows
        rows = min(n_tasks, _MIN_CHUNK_ROWS)
        if _auto_batch(budget, ncols, n_tasks) < rows:
            width = max(1, (budget // rows - 256) // (3 * 4 + 2))
    if width is not None and width >= ncols:
        width = None
    if width is not None and not accepts_entities(meth):
        warnings.warn(
            f"scorer.{meth.__name__} has no entities= keyword: entity chunking is impossible, "
            "whole score rows are used",
            stacklevel=4,
        )
        width = None
    if width is None:
        return batch_size or _auto_batch(budget, ctx.num_entities, n_tasks), None
    ctx.chunk_used = int(width) if ctx.chunk_used is None else max(ctx.chunk_used, int(width))
    return batch_size or _auto_batch(budget, width, n_tasks), int(width)


def _rank_full(ctx, side, sub, eval_idx, keys, answers, index, batch_size, budget, bar, qacc) -> _SideResult:
    dev = ctx.device
    # group tasks by query: one score row per unique query
    order = np.argsort(keys, kind="stable")
    skeys = keys[order]
    # skeys is sorted: a query starts where its key differs from the previous one
    qstart = np.flatnonzero(np.r_[True, skeys[1:] != skeys[:-1]])
    uq = skeys[qstart]
    qcount = np.diff(np.r_[qstart, skeys.shape[0]])
    task_end = np.cumsum(qcount)  # tasks of queries [0, i] end at task_end[i]
    q_ent = (uq // ctx.num_relations).astype(np.int64)
    q_rel = (uq % ctx.num_relations).astype(np.int64)
    s_ans = answers[order]
    s_tri = sub[order]
    s_idx = eval_idx[order]
    n_tasks = order.shape[0]
    bs, width = _plan_chunks(ctx, side, budget, batch_size, n_tasks)
    res = _SideResult()
    t_q_ent = torch.as_tensor(q_ent, device=dev)
    t_q_rel = torch.as_tensor(q_rel, device=dev)
    t_keys = torch.as_tensor(uq, device=dev)
    t_ans = torch.as_tensor(s_ans, device=dev)
    state = {"q": 0}

    def step(t0, t1):
        # the batch covers whole queries: from the query holding task t0 up to the last query
        # that ends at or before t1 (at least one query)
        q0 = state["q"]
        q1 = int(np.searchsorted(task_end, t1, side="right"))
        q1 = max(q1, q0 + 1)
        t_stop = int(task_end[q1 - 1])
        a0 = int(task_end[q0 - 1]) if q0 > 0 else 0
        _rank_query_batch(ctx, side, q0, q1, a0, t_stop, qstart, t_q_ent, t_q_rel, t_keys, t_ans, s_tri, index, res,
                          qacc, width)
        res.triple_index.append(s_idx[a0:t_stop])
        state["q"] = q1
        state["t"] = t_stop
        return t_stop - a0

    # step() may consume more tasks than asked (whole queries); drive it by query progress
    a = 0
    while a < n_tasks:
        q0 = state["q"]
        try:
            done = step(a, min(n_tasks, a + bs))
        except Exception as exc:  # noqa: BLE001
            if not _is_oom(exc) or bs == 1:
                raise
            state["q"] = q0
            bs = max(1, bs // 2)
            warnings.warn(f"out of memory: retrying with batch size {bs}", stacklevel=2)
            continue
        bar.update(done)
        a += done
    return res


def _count_tasks(ctx, scores, true, task_q, first, rest):
    """``better`` / ``tied`` of every task of a batch against its query row of ``scores``.

    Works in row blocks of about ``_BLOCK_ELEMS`` scores, so the comparison buffer stays in
    cache and is reused (never a fresh batch-sized allocation). ``first`` (one task per query
    row, or None when every row has exactly one task) compares against the matrix rows in
    place; only the further tasks of shared queries (``rest``) need gathered copies of their
    rows, one block at a time.
    """
    nq, ncols = scores.shape
    nt = true.shape[0]
    dev = scores.device
    # cache-sized blocks on CPU; on accelerators big blocks (few kernel launches) are better
    block = max(1, (_BLOCK_ELEMS if dev.type == "cpu" else 1 << 26) // max(1, ncols))
    ctx.buf = _grow(ctx.buf, min(nq, block) * ncols, dev)
    better = torch.empty(nt, dtype=torch.long, device=dev)
    tied = torch.empty(nt, dtype=torch.long, device=dev)
    if first is None:
        first_t = true
    else:
        first_t = true[first]
    fb = torch.empty(nq, dtype=torch.long, device=dev)
    ft = torch.empty(nq, dtype=torch.long, device=dev)
    for i in range(0, nq, block):
        j = min(nq, i + block)
        fb[i:j], ft[i:j] = _count(scores[i:j], first_t[i:j, None], ctx.tol, ctx.buf)
    if first is None:
        return fb, ft
    better[first], tied[first] = fb, ft
    for i in range(0, rest.numel(), block):
        sel = rest[i : i + block]
        # advanced indexing, not index_select: on CPU (torch 2.13) index_select of whole float
        # rows was measured ~100x slower (2.4 s vs 27 ms for 300 rows of 40,943 floats)
        mat = scores[task_q[sel]]
        better[sel], tied[sel] = _count(mat, true[sel][:, None], ctx.tol, ctx.buf)
        del mat
    return better, tied


def _rank_query_batch(ctx, side, q0, q1, a0, a1, qstart, q_ent, q_rel, keys, ans_all, s_tri, index, res, qacc,
                      width=None):
    """Rank the tasks ``a0:a1`` whose queries are ``q0:q1`` (one score row per query).

    Filtering works on the query rows: the true scores are read first, then every known answer
    of the query (the task's own answer included) is overwritten with NaN, which compares
    neither greater nor equal. So ``better = #{row > s}`` and ``tied = #{row == s}`` directly
    exclude the filtered answers and the answer itself, at a cost linear in the number of
    known answers per *query*; tasks sharing a query never repeat that work. With ``width``,
    rows are scored in column chunks (see the module docstring).
    """
    dev = ctx.device
    nq = q1 - q0
    ncols = ctx.num_columns
    ans = ans_all[a0:a1]
    nt = a1 - a0
    # local query row of each task
    task_q = torch.as_tensor(np.searchsorted(qstart[q0:q1], np.arange(a0, a1), side="right") - 1, device=dev)
    col = ans if ctx.pos_map is None else ctx.pos_map[ans]
    if nt == nq:
        first = rest = None
    else:
        first = torch.as_tensor(qstart[q0:q1] - a0, device=dev)
        rest = torch.ones(nt, dtype=torch.bool, device=dev)
        rest[first] = False
        rest = rest.nonzero().view(-1)
    if index is not None:
        rows, ents = index.pairs(keys[q0:q1])
        if ctx.pos_map is None:
            fcol = ents
        else:  # answers outside the restriction are not candidates
            fcol = ctx.pos_map[ents]
            ok = fcol >= 0
            rows, fcol = rows[ok], fcol[ok]
        nfilt = torch.zeros(nq, dtype=torch.long, device=dev).index_add_(0, rows, torch.ones_like(rows))
        # the true answer is one of the known answers: count it back in
        ncand = ncols - nfilt[task_q] + 1
    else:
        ncand = torch.full((nt,), ncols, dtype=torch.long, device=dev)
    masked = None
    if width is None:
        scores = _score_rows(ctx, side, q_ent[q0:q1], q_rel[q0:q1])
        true = scores[task_q, col]
        _nan_check(ctx, side, scores, true, s_tri[a0:a1], task_q)
        if index is not None:
            if scores._is_view():  # we write into the matrix: never into the scorer's own storage
                scores = scores.clone()
            if qacc is not None:  # query metrics restore the relevant answers' scores
                masked = (rows, fcol, scores[rows, fcol])
            scores[rows, fcol] = float("nan")
        better, tied = _count_tasks(ctx, scores, true, task_q, first, rest)
    else:
        ent, rel = q_ent[q0:q1], q_rel[q0:q1]
        # pass 1: the true scores, read from the chunk holding each answer
        true = torch.empty(nt, dtype=torch.float32, device=dev)
        chunk_of = col // width
        for c in torch.unique(chunk_of).tolist():
            sel = (chunk_of == c).nonzero().view(-1)
            part = _score_chunk(ctx, side, ent, rel, c * width, min(ncols, (c + 1) * width))
            if true.dtype != part.dtype:
                true = true.to(part.dtype)
            true[sel] = part[task_q[sel], col[sel] - c * width]
            del part
        if index is not None:
            order = torch.argsort(fcol)
            rows, fcol = rows[order], fcol[order]
        better = torch.zeros(nt, dtype=torch.long, device=dev)
        tied = torch.zeros(nt, dtype=torch.long, device=dev)
        # pass 2: count chunk by chunk, masking the known answers that fall in the chunk
        for c0 in range(0, ncols, width):
            c1 = min(ncols, c0 + width)
            part = _score_chunk(ctx, side, ent, rel, c0, c1)
            _nan_check(ctx, side, part, true, s_tri[a0:a1], task_q)
            if index is not None:
                lo, hi = torch.searchsorted(fcol, torch.tensor([c0, c1], device=dev)).tolist()
                if hi > lo:
                    if part._is_view():
                        part = part.clone()
                    part[rows[lo:hi], fcol[lo:hi] - c0] = float("nan")
            b, t = _count_tasks(ctx, part, true, task_q, first, rest)
            better += b
            tied += t
            del part
    if index is None:
        tied = tied - 1  # the true answer ties with itself
    if ctx.nan_policy == "worst":
        bad = torch.isnan(true)
        if bool(bad.any()):  # a NaN true score ranks last
            better = torch.where(bad, ncand - 1, better)
            tied = torch.where(bad, torch.zeros_like(tied), tied)
    if ctx.check_consistency:
        picks = sorted({0, nt - 1})
        scale = None
        if width is None:  # score scale of the checked tasks' rows (masked answers count 0)
            rows_checked = scores[task_q[torch.as_tensor(picks, device=dev)]]
            scale = float(torch.nan_to_num(rows_checked.abs().double(), nan=0.0, posinf=0.0).mean())
        _consistency(ctx, side, s_tri[a0:a1], true, picks, scale)
    if qacc is not None:
        _query_metrics(ctx, side, scores, task_q, col, masked, qacc)
    res.better.append(better.cpu().numpy())
    res.tied.append(tied.cpu().numpy())
    res.ncand.append(ncand.cpu().numpy())


def _query_metrics(ctx, side, scores, task_q, col, masked, qacc):
    """Query-level hits: relevant answers get their scores back, answers known only from the
    filter sets become ``-inf`` and are subtracted from the candidate count."""
    dev = scores.device
    nq, ncols = scores.shape
    code = torch.unique(task_q * ncols + col)  # unique (query row, relevant column) pairs
    rel_rows, rel_cols = code // ncols, code % ncols
    num_rel = torch.zeros(nq, dtype=torch.long, device=dev).index_add_(0, rel_rows, torch.ones_like(rel_rows))
    n_excl = torch.zeros(nq, dtype=torch.long, device=dev)
    if masked is not None:
        rows, fcol, saved = masked
        is_rel = torch.isin(rows * ncols + fcol, code)
        scores[rows, fcol] = torch.where(is_rel, saved, torch.full_like(saved, float("-inf")))
        n_excl.index_add_(0, rows, (~is_rel).long())
    elif scores._is_view():
        scores = scores.clone()
    if ctx.nan_policy == "worst" and bool(torch.isnan(scores).any()):
        scores = torch.nan_to_num(scores, nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    hits = expected_hits(scores, rel_rows, rel_cols, num_rel, n_excl, qacc.ks)
    qacc.add(SIDE_NAMES[side], hits, num_rel, ncols - n_excl)


# ---------------------------------------------------------------------------- sampled ranking
def _rank_sampled(ctx, side, sub, eval_idx, negs, batch_size, budget, bar) -> tuple[_SideResult, bool]:
    dev = ctx.device
    s = ctx.scorer
    cand_meth = getattr(s, "score_head_candidates" if side == SIDE_HEAD else "score_tail_candidates", None)
    use_cand = callable(cand_meth)
    n = sub.shape[0]
    k = negs.shape[1]
    cols = (k + 1) if use_cand else ctx.num_entities
    bs = batch_size or _auto_batch(budget, cols, n)
    res = _SideResult()
    t_sub = torch.as_tensor(sub, device=dev)
    t_negs = torch.as_tensor(negs, device=dev)

    def step(a0, a1):
        h, r, t = t_sub[a0:a1, 0], t_sub[a0:a1, 1], t_sub[a0:a1, 2]
        ans = t if side == SIDE_TAIL else h
        ent = h if side == SIDE_TAIL else t
        ng = t_negs[a0:a1]
        valid = ng >= 0
        cand = torch.cat([ans[:, None], torch.where(valid, ng, ans[:, None])], dim=1)
        if use_cand:
            with _Threads(ctx.score_threads):
                sc = cand_meth(ent, r, cand) if side == SIDE_TAIL else cand_meth(r, ent, cand)
            key = (side, "cand")
            if key not in ctx.shape_checked:
                _check_output(sc, tuple(cand.shape), cand_meth.__name__)
                ctx.shape_checked.add(key)
        else:  # generic fallback: score whole rows (all entities), then gather the candidates
            meth = s.score_tails if side == SIDE_TAIL else s.score_heads
            with _Threads(ctx.score_threads):
                full = meth(ent, r) if side == SIDE_TAIL else meth(r, ent)
            key = (side, "rows")
            if key not in ctx.shape_checked:
                _check_output(full, (a1 - a0, ctx.num_entities), meth.__name__)
                ctx.shape_checked.add(key)
            sc = full.gather(1, cand)
        true = sc[:, 0]
        _nan_check(ctx, side, sc, true, sub[a0:a1], torch.arange(a1 - a0, device=dev))
        neg = sc[:, 1:]
        if ctx.tol == 0:
            gt, eq = neg > true[:, None], neg == true[:, None]
        else:
            gt = neg > true[:, None] + ctx.tol
            eq = (neg >= true[:, None] - ctx.tol) & (neg <= true[:, None] + ctx.tol)
        better = (gt & valid).sum(1)
        tied = (eq & valid).sum(1)
        ncand = 1 + valid.sum(1)
        if ctx.nan_policy == "worst":
            bad = torch.isnan(true)
            better = torch.where(bad, ncand - 1, better)
            tied = torch.where(bad, torch.zeros_like(tied), tied)
        if ctx.check_consistency:
            _consistency(ctx, side, sub[a0:a1], true, sorted({0, a1 - a0 - 1}))
        res.better.append(better.cpu().numpy())
        res.tied.append(tied.cpu().numpy())
        res.ncand.append(ncand.cpu().numpy())
        res.triple_index.append(eval_idx[a0:a1])
        return a1 - a0

    _run_batches(n, bs, step, bar)
    return res, use_cand
