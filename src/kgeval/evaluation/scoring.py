"""One adapter per side between the evaluator and a scorer (:class:`SideScorer`; an entity shard's:
:class:`ShardSideScorer`): side dispatch, thread count, entity subsets, candidates, the consistency
check's single-triple score, reused score blocks and prepared queries. Every returned tensor is checked
on every call (type, shape, dtype, device; half precision widened, other devices moved), and
:meth:`SideScorer.writable` gives a tensor safe to write (a copy unless the evaluator owns the storage).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from .._threads import torch_threads
from .._validation import check_score_tensor
from ..errors import InvalidInputError
from ..ranks import SIDE_HEAD, SIDE_NAMES, SIDE_TAIL
from .scorers import accepts_entities, accepts_keyword

__all__ = ["SideScorer", "ShardSideScorer", "eval_mode"]


def own_prepare(obj, score: str, prepare: str, run: str):
    """``obj.<prepare>`` when ``obj`` has callable ``score``, ``prepare`` and ``run`` methods defined by
    one and the same class (the first in its MRO to define each), else None: duck-typed (any scorer may
    offer prepared queries), and a subclass that overrides ``score`` alone scores its own way, per
    slice, never bypassed by queries prepared the parent's way."""
    if not all(callable(getattr(obj, name, None)) for name in (score, prepare, run)):
        return None
    owners = {next((k for k in type(obj).__mro__ if name in vars(k)), None) for name in (score, prepare, run)}
    return getattr(obj, prepare) if len(owners) == 1 and None not in owners else None


def _prepare_method(scorer, side: int):
    """``scorer.prepare_heads`` / ``prepare_tails`` (see :func:`own_prepare`), or None."""
    kind = "heads" if side == SIDE_HEAD else "tails"
    return own_prepare(scorer, f"score_{kind}", f"prepare_{kind}", "score_prepared")


_WIDEN = (torch.float16, torch.bfloat16)


def _tensors_of(obj, depth: int = 2):
    """The tensors an object holds (attributes, module parameters and buffers), a few levels deep."""
    if isinstance(obj, torch.Tensor):
        yield obj
        return
    if isinstance(obj, torch.nn.Module):
        yield from obj.parameters()
        yield from obj.buffers()
        return
    if depth == 0:
        return
    for value in getattr(obj, "__dict__", {}).values():
        if isinstance(value, (torch.Tensor, torch.nn.Module)) or (
            hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value)
        ):
            yield from _tensors_of(value, depth - 1)


class SideScorer:
    """Scores of one side's queries ``(ent, rel)``: ``ent`` is the head for tail prediction and
    the tail for head prediction."""

    def __init__(self, scorer, side: int, *, num_entities: int, device: torch.device,
                 allowed: torch.Tensor | None, threads: int | None):
        self.scorer = scorer
        self.side = side
        self.num_entities = num_entities
        self.device = device
        self.allowed = allowed  # sorted allowed entity ids, or None = all
        self.num_columns = num_entities if allowed is None else int(allowed.shape[0])
        self.threads = threads
        self.method = scorer.score_heads if side == SIDE_HEAD else scorer.score_tails
        # the protocol's names for messages (a lambda or functools.partial has no useful __name__)
        self.method_name = "score_heads" if side == SIDE_HEAD else "score_tails"
        # entity_subsets=False: entities= is served from whole rows (e.g. a PyKEEN model that cannot
        # score subsets), so chunks would each cost a whole row: score whole rows instead
        self.accepts_entities = accepts_entities(self.method) and getattr(scorer, "entity_subsets", True) is not False
        cand = getattr(scorer, "score_head_candidates" if side == SIDE_HEAD else "score_tail_candidates", None)
        self.candidates_method = cand if callable(cand) else None
        self.candidates_name = "score_head_candidates" if side == SIDE_HEAD else "score_tail_candidates"
        #: declared working memory per score entry beyond the score matrix (see the scorer protocol)
        self.score_bytes = float(getattr(scorer, "score_bytes", 0.0) or 0.0)
        #: on the CPU a scorer taking ``out=`` writes each score block into one reused buffer
        self.accepts_out = device.type == "cpu" and accepts_keyword(self.method, "out")
        self._blocks: list[torch.Tensor | None] = []  # one per concurrent chunk walker (slot)
        #: the scorer's prepare_heads / prepare_tails (queries built once per batch), or None
        self.prepare = _prepare_method(scorer, side)
        #: the scorer declares its preparation light (``light_prepare``): walkers may run it on one thread
        self.light_prepare = getattr(scorer, "light_prepare", False) is True

    def _call(self, method, ent, rel, *args, **kw):
        q = (rel, ent) if self.side == SIDE_HEAD else (ent, rel)
        with torch_threads(self.threads):
            return method(*q, *args, **kw)

    def _checked(self, out, shape: tuple[int, ...], name: str) -> torch.Tensor:
        """``out`` checked against ``shape``, widened to float32 if half precision, on our device."""
        check_score_tensor(f"scorer.{name}", out, shape, f"{SIDE_NAMES[self.side]} prediction of {shape[0]} queries")
        self.returned_dtype = out.dtype  # as the scorer returned them (the consistency check's tolerance)
        if out.dtype in _WIDEN:
            out = out.float()
        if out.device != self.device:
            out = out.to(self.device)
        return out

    # ------------------------------------------------------------------ scoring
    def _reused(self, b: int, m: int, slot: int = 0) -> dict:
        """``{"out": a (b, m) view of the reused float32 block of ``slot``}`` for a scorer taking
        ``out=``, else ``{}``.

        A block is overwritten by the next call of the same slot (one slot per walker): callers use its
        scores before asking for the next (scores kept beyond that are indexed out, i.e. copied)."""
        if not self.accepts_out:
            return {}
        while len(self._blocks) <= slot:
            self._blocks.append(None)
        block = self._blocks[slot]
        if block is None or block.numel() < b * m:
            # grow at least 2x (up to 4M entries) so batches of slowly rising row counts do not
            # reallocate each time; never more than 16 MiB beyond what a batch needs
            old = 0 if block is None else block.numel()
            self._blocks[slot] = None  # free the old block before allocating the larger one
            block = torch.empty(max(b * m, min(2 * old, 1 << 22)), dtype=torch.float32, device=self.device)
            self._blocks[slot] = block
        return {"out": block[: b * m].view(b, m)}

    def rows(self, ent: torch.Tensor, rel: torch.Tensor, slot: int = 0, prepared=None) -> torch.Tensor:
        """Scores of all allowed entities for each query: ``(b, num_columns)`` (``slot``: see :meth:`_reused`;
        ``prepared``: these queries prepared, e.g. ``batch_prepared.rows(a, b)``, see :meth:`prepared`)."""
        b = ent.shape[0]
        if prepared is not None:
            return self._tile(ent, rel, 0, self.num_columns, self._reused(b, self.num_columns, slot), prepared)
        if self.allowed is not None and self.accepts_entities:
            out = self._call(self.method, ent, rel, entities=self.allowed, **self._reused(b, self.num_columns, slot))
            return self._checked(out, (b, self.num_columns), self.method_name)
        kw = self._reused(b, self.num_entities, slot) if self.allowed is None else {}
        out = self._checked(self._call(self.method, ent, rel, **kw), (b, self.num_entities), self.method_name)
        return out if self.allowed is None else out.index_select(1, self.allowed)

    def prepared(self, ent: torch.Tensor, rel: torch.Tensor, walkers: int = 1):
        """This batch's queries prepared once (the scorer's ``prepare_tails`` / ``prepare_heads``) for
        :meth:`chunk` / :meth:`tiles` / :meth:`rows`, or None when the scorer has no such methods.
        ``prepared.rows(a, b)``: the queries ``a:b`` of them (:class:`kgeval.models.base.PreparedQueries`).

        With ``walkers > 1`` a preparation the scorer declares light (``light_prepare``) runs on one thread
        (an OpenMP worker would spin on a core the walkers need); a heavy one keeps the caller's threads."""
        if self.prepare is None:
            return None
        q = (rel, ent) if self.side == SIDE_HEAD else (ent, rel)
        threads = 1 if walkers > 1 and self.light_prepare else self.threads
        with torch_threads(threads):
            return self.prepare(*q)

    def chunk(self, ent: torch.Tensor, rel: torch.Tensor, c0: int, c1: int, slot: int = 0,
              prepared=None) -> torch.Tensor:
        """Scores of the allowed entities at column positions ``[c0, c1)``: ``(b, c1 - c0)``
        (``prepared``: :meth:`prepared` of these queries, the same scores without rebuilding them)."""
        return self._tile(ent, rel, c0, c1, self._reused(ent.shape[0], c1 - c0, slot), prepared)

    def tiles(self, ent: torch.Tensor, rel: torch.Tensor, width: int, slot: int = 0, prepared=None) -> list[torch.Tensor]:
        """Scores of all columns for each query as column tiles ``[0, width)``, ``[width, 2 width)``, ...:
        a list of ``(b, c1 - c0)`` tensors, laid out tile after tile in the slot's block of the whole
        rows' size (:meth:`_reused`; needs ``entities=``; ``prepared`` as in :meth:`rows`)."""
        b, n = ent.shape[0], self.num_columns
        block = self._reused(b, n, slot).get("out")
        flat = None if block is None else block.view(-1)
        if prepared is None:
            prepared = self.prepared(ent, rel)
        out = []
        for c0 in range(0, n, width):
            c1 = min(n, c0 + width)
            kw = {} if flat is None else {"out": flat[b * c0 : b * c1].view(b, c1 - c0)}
            out.append(self._tile(ent, rel, c0, c1, kw, prepared))
        return out

    def _tile(self, ent, rel, c0: int, c1: int, kw: dict, prepared=None) -> torch.Tensor:
        """Scores of the columns ``[c0, c1)`` (``kw``: an ``out=`` block, or nothing; ``prepared``:
        see :meth:`chunk`)."""
        entities = slice(c0, c1) if self.allowed is None else self.allowed[c0:c1]
        if prepared is not None:
            with torch_threads(self.threads):
                out = self.scorer.score_prepared(prepared, entities=entities, **kw)
        else:
            out = self._call(self.method, ent, rel, entities=entities, **kw)
        return self._checked(out, (ent.shape[0], c1 - c0), self.method_name)

    def columns(self, ent: torch.Tensor, rel: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Scores of the allowed entities at the (sorted) column positions ``cols``: ``(b, len(cols))``."""
        entities = cols if self.allowed is None else self.allowed[cols]
        out = self._call(self.method, ent, rel, entities=entities)
        return self._checked(out, (ent.shape[0], int(cols.shape[0])), self.method_name)

    def candidates(self, ent: torch.Tensor, rel: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        """Scores of the listed candidates ``cand`` ``(b, m)`` of each query: ``(b, m)``.

        Without a ``score_*_candidates`` method, whole rows are scored and the candidates gathered.
        """
        if self.candidates_method is not None:
            out = self._call(self.candidates_method, ent, rel, cand)
            return self._checked(out, tuple(cand.shape), self.candidates_name)
        full = self._checked(self._call(self.method, ent, rel), (ent.shape[0], self.num_entities), self.method_name)
        return full.gather(1, cand)

    def alone(self, h: int, r: int, t: int) -> float:
        """The score of one triple computed on its own (for the consistency check)."""
        s = self.scorer
        hh, rr, tt = (torch.tensor([x], device=self.device) for x in (h, r, t))
        # models with inverse relations score head prediction (?, r, t) as the tail prediction
        # (t, r⁻¹, ?): a genuinely different number from score_triples(h, r, t), so compare rows
        inverse_head = self.side == SIDE_HEAD and bool(getattr(s, "inverse_relations", False))
        if self.side == SIDE_HEAD and callable(getattr(s, "score_head_triples", None)):
            return self._one(s.score_head_triples(hh, rr, tt), "score_head_triples")
        if callable(getattr(s, "score_triples", None)) and not inverse_head:
            return self._one(s.score_triples(hh, rr, tt), "score_triples")
        if self.side == SIDE_TAIL:
            return float(self._checked(s.score_tails(hh, rr), (1, self.num_entities), "score_tails")[0, t])
        return float(self._checked(s.score_heads(rr, tt), (1, self.num_entities), "score_heads")[0, h])

    def _one(self, out, name: str) -> float:
        """The single score a triple scorer returned for one triple (a named error for any other count)."""
        if not isinstance(out, torch.Tensor):
            raise InvalidInputError(f"scorer.{name} must return a torch.Tensor, got {type(out).__name__}")
        if out.numel() == 1:
            check_score_tensor(f"scorer.{name}", out, tuple(out.shape))
        if out.numel() != 1:
            raise InvalidInputError(f"scorer.{name} returned shape {tuple(out.shape)} for one triple, expected 1 score")
        return float(out.reshape(-1)[0])

    # ------------------------------------------------------------------ ownership
    def writable(self, scores: torch.Tensor) -> torch.Tensor:
        """``scores``, or a copy when writing into it could change memory the evaluator does not own.

        ``Tensor._is_view()`` cannot tell: tensors made under ``torch.inference_mode`` carry no view
        metadata (an ``expand``-ed popularity row looked like a fresh matrix and the filter wrote
        into the shared row). The storage itself can: a result the evaluator may overwrite is
        contiguous, fills its whole storage, and is none of the scorer's own tensors.
        """
        if self._owns(scores):
            return scores
        return scores.clone(memory_format=torch.contiguous_format)

    def _owns(self, t: torch.Tensor) -> bool:
        if t.is_contiguous() and any(b is not None and t.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
                                     for b in self._blocks):
            return True  # a reused block: the evaluator's own buffer, lent to the scorer for one call
        if not t.is_contiguous() or t.storage_offset() != 0:
            return False
        storage = t.untyped_storage()
        if storage.nbytes() != t.numel() * t.element_size():
            return False  # a window on a larger storage, or a broadcast of a smaller one
        # looked up on every call: a scorer may replace its buffers between calls
        ptr = storage.data_ptr()
        for x in _tensors_of(self.scorer):
            try:
                if x.untyped_storage().data_ptr() == ptr:
                    return False
            except (RuntimeError, NotImplementedError):  # sparse or meta tensors hold no plain storage
                pass
        return True


# ------------------------------------------------------------------ one side of an entity shard
def _prepare_from(shard, side: int):
    """``shard.prepare_heads_from`` / ``prepare_tails_from`` of a kgeval :class:`EntityShard` (see
    :func:`.scoring.own_prepare`; a user's shard is called per slice)."""
    kind = "heads" if side == SIDE_HEAD else "tails"
    return own_prepare(shard, f"score_{kind}_from", f"prepare_{kind}_from", "score_prepared_from")


class ShardSideScorer(SideScorer):
    """One side of an entity shard: scores of query rows against the local (allowed) entities.

    Local columns are the allowed entities inside ``[lo, hi)``: positions ``[c_lo, c_hi)`` of the
    global candidate columns (the allowed ids are sorted, so they are contiguous).
    """

    def __init__(self, shard, side: int, *, num_entities: int, device: torch.device, allowed, threads, layout: tuple):
        """``layout``: ``(lo, hi, row width, row dtype)`` of this rank's entity shard (``RunContext.shard``)."""
        lo, hi, width, row_dtype = layout
        self.scorer = shard
        self.side = side
        self.num_entities = num_entities
        self.device = device
        self.allowed = allowed
        self.threads = threads
        self.method = shard.score_heads_from if side == SIDE_HEAD else shard.score_tails_from
        self.accepts_entities = True
        self.candidates_method = None
        self.score_bytes = float(getattr(shard, "score_bytes", 0.0) or 0.0)
        self.lo, self.hi, self.width, self.row_dtype = lo, hi, width, row_dtype
        if allowed is None:
            self.c_lo, self.c_hi = lo, hi
        else:
            self.c_lo, self.c_hi = (int(x) for x in torch.searchsorted(allowed, torch.tensor([lo, hi],
                                                                                            device=allowed.device)))
        self.num_local = self.c_hi - self.c_lo
        #: this scorer's columns are the local ones (what :mod:`.full`'s chunk passes walk)
        self.num_columns = self.num_local
        self._score_dtype: torch.dtype | None = None
        # on the CPU a shard taking out= writes each local block into one reused buffer, as in one process
        self.accepts_out, self._blocks = device.type == "cpu" and accepts_keyword(self.method, "out"), []
        #: the shard's prepare_heads_from / prepare_tails_from (queries built once per batch), or None
        self.prepare = _prepare_from(shard, side)
        self.light_prepare = getattr(shard, "light_prepare", False) is True

    def query_rows(self, ent: torch.Tensor) -> torch.Tensor:
        """``(len(ent), width)``: the rows of the query entities owned here, zeros elsewhere."""
        rows = torch.zeros((ent.shape[0], self.width), dtype=self.row_dtype, device=self.device)
        own = ((ent >= self.lo) & (ent < self.hi)).nonzero().view(-1)
        if own.numel():
            out = self.scorer.entity_rows(ent[own])
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (own.numel(), self.width) \
                    or not out.is_floating_point():
                raise InvalidInputError(f"scorer.entity_rows returned {type(out).__name__} "
                                        f"{tuple(getattr(out, 'shape', ()))}, expected ({own.numel()}, {self.width}) "
                                        "floats")
            rows[own] = out.to(device=self.device, dtype=self.row_dtype)
        return rows

    def _tile(self, rows, rel, c0: int, c1: int, kw: dict, prepared=None) -> torch.Tensor:
        """Scores of the local columns ``[c0, c1)`` (local positions): ``(b, c1 - c0)``, for
        :meth:`SideScorer.chunk` (in the reused block when the shard takes ``out=``) and
        :meth:`SideScorer.tiles`; all local columns are asked for as ``entities=None``."""
        if self.allowed is None:
            entities = None if (c0, c1) == (0, self.num_local) else slice(self.lo + c0, self.lo + c1)
        else:
            entities = self.allowed[self.c_lo + c0:self.c_lo + c1]
        return self._scored(rows, rel, entities, c1 - c0, prepared, **kw)

    def columns(self, rows: torch.Tensor, rel: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Scores of the local columns at the sorted local positions ``cols``: ``(b, len(cols))``."""
        entities = cols + self.lo if self.allowed is None else self.allowed[cols + self.c_lo]
        return self._scored(rows, rel, entities, int(cols.shape[0]))

    def _scored(self, rows, rel, entities, m: int, prepared=None, **kw) -> torch.Tensor:
        if prepared is not None:  # the batch's queries, built once (EntityShard.prepare_tails_from)
            with torch_threads(self.threads):
                out = self.scorer.score_prepared_from(prepared, entities=entities, **kw)
        else:
            out = self._call(self.method, rows, rel, entities=entities, **kw)
        out = self._checked(out, (rows.shape[0], m), self.method.__name__)
        self._score_dtype = out.dtype
        return out

    def score_dtype(self, rows: torch.Tensor, rel: torch.Tensor) -> torch.dtype:
        """The dtype of this shard's scores (true scores are compared in it, as in one process): from
        the last scoring call, else one probe call on a single row and column; float32 (float64 for
        float64 rows) without local columns, where nothing is compared."""
        if self._score_dtype is None:
            if self.num_local and rows.shape[0]:
                self.chunk(rows[:1], rel[:1], 0, 1)
            else:
                return torch.float64 if self.row_dtype == torch.float64 else torch.float32
        return self._score_dtype

    def local_column(self, ids: torch.Tensor, pos_map) -> torch.Tensor:
        """Local column of each entity id (-1: not a local candidate)."""
        p = ids if pos_map is None else pos_map[ids.clamp(min=0)]
        ok = (ids >= 0) & (p >= self.c_lo) & (p < self.c_hi)
        return torch.where(ok, p - self.c_lo, torch.full_like(p, -1))


@contextmanager
def eval_mode(scorer):
    """Run the block with ``scorer`` (and the model it wraps, ``scorer.model``) in eval mode where they are
    torch modules, restoring every submodule's own mode afterwards: an evaluation needs deterministic
    scores (no dropout, no batch-norm updates from the evaluation's batches)."""
    modules = {id(obj): obj for obj in (scorer, getattr(scorer, "model", None)) if isinstance(obj, torch.nn.Module)}
    states = [(m, m.training) for obj in modules.values() for m in obj.modules() if m.training]
    for obj in modules.values():
        if any(m.training for m in obj.modules()):
            obj.eval()
    try:
        yield
    finally:
        for m, mode in states:
            m.training = mode
