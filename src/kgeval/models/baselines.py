"""Non-trained baselines, evaluated like any model: what a dataset gives away without learning.

Each is fitted on the training triples (:meth:`Baseline.fit`; :func:`kgeval.pipeline` does it in place of
training) and scores every candidate of a query from counts alone; most candidates tie, and kgeval's
realistic rank is the exact expected rank under random tie-breaking, so no tie is broken in the baseline's
favour (an optimistic ``>`` rule would give a constant scorer MRR 1).

- ``popularity``: ``score(h, r, t) = deg(h) + deg(t)``, ``deg(e)`` the number of training triples ``e`` occurs
  in, as head or tail: a tail query ranks the candidates by ``deg(t)`` (``deg(h)`` is the same for all of them),
  a head query by ``deg(h)``.
- ``marginal``: ``score(h, r, t) = #{(x, r, t)} + #{(h, r, x)}`` in training: a tail query ranks the candidates
  by their training frequency as tails of ``r``, a head query by theirs as heads of ``r``.
- ``rule``: the inverse/duplicate rules of Dettmers et al. (2018; ConvE's ``reverse_rule.py``) mined from
  training: ``(t, r', h) => (h, r, t)`` (inverse, ``r' = r`` for a symmetric relation) and ``(h, r', t) =>
  (h, r, t)`` (duplicate, ``r' != r``) hold when at least ``threshold`` of ``r'``'s training pairs imply a
  training triple of ``r``. ``score(h, r, t) = 1`` when a rule implies the triple from a training triple,
  else 0. Unlike ConvE's script, the rules fire on training triples only (it adds validation), and every
  score is evaluated by kgeval's own ranks (it draws one random rank per triple).

They hold their counts as buffers (saved and loaded as any model's weights): sorted keys and CSR-like arrays,
never a relations x entities matrix; a score row is built per query batch.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from ..errors import InvalidInputError
from .base import Model, PreparedQueries, _as_index

#: the confidence a rule needs by default: the default of ConvE's ``check_for_reversible_relations``
DEFAULT_THRESHOLD = 0.8

__all__ = ["Baseline", "PopularityBaseline", "MarginalBaseline", "RuleBaseline", "BASELINES"]


class Baseline(Model):
    """A model without parameters whose scores are counts over the training triples (see the module docstring)."""

    #: not trainable: the pipeline fits it instead of training it
    trainable: ClassVar[bool] = False
    #: buffer names, in the order :meth:`load_state_dict` sets them
    _buffers_: ClassVar[tuple[str, ...]] = ()

    def __init__(self, num_entities: int, num_relations: int, *, dim: int = 1, inverse_relations: bool = False):
        if inverse_relations:
            raise InvalidInputError(f"the {self.name} baseline has no inverse relations (it is not trained)")
        super().__init__(num_entities, num_relations, dim=1)
        for name in self._buffers_:
            self.register_buffer(name, torch.zeros(0, dtype=torch.float64 if name.endswith("count") else torch.int64))
        self.fitted = False

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def fit(self, training) -> "Baseline":
        """Count what the baseline needs in ``training`` (an ``(n, 3)`` id array); returns the baseline."""
        triples = np.asarray(torch.as_tensor(training).cpu(), dtype=np.int64).reshape(-1, 3)
        if len(triples) == 0:
            raise InvalidInputError(f"the {self.name} baseline needs training triples to count, got none")
        if triples.min() < 0 or triples[:, [0, 2]].max() >= self.num_entities or \
                triples[:, 1].max() >= self.num_relations:
            raise InvalidInputError(f"training triples hold ids out of range for {self.num_entities} entities and "
                                    f"{self.num_relations} relations")
        triples = np.unique(triples, axis=0)  # a repeated line is one fact
        for name, value in self._count(triples).items():
            setattr(self, name, torch.from_numpy(np.array(value, copy=True)))  # own, contiguous memory
        self.fitted = True
        return self

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Counts of any size (their size is the data's, not the constructor's)."""
        missing = [n for n in self._buffers_ if n not in state_dict]
        if strict and (missing or set(state_dict) - set(self._buffers_)):
            raise RuntimeError(f"{self.name} baseline state: missing {missing}, "
                               f"unexpected {sorted(set(state_dict) - set(self._buffers_))}")
        for name in self._buffers_:
            if name in state_dict:
                setattr(self, name, torch.as_tensor(state_dict[name]).clone())
        self.fitted = True
        return torch.nn.modules.module._IncompatibleKeys([], [])

    def _count(self, triples: np.ndarray) -> dict[str, np.ndarray]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _rows(self, side: str, anchors: np.ndarray, relations: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise InvalidInputError(f"the {self.name} baseline is not fitted: call .fit(training triples) first")

    def _scores(self, side: str, anchor: torch.Tensor, r: torch.Tensor, cand, out=None) -> torch.Tensor:
        return _columns(cand, out, self._score_rows(side, anchor, r))

    def _score_rows(self, side: str, anchor: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """The whole ``(batch, num_entities)`` score rows of the queries (float32: counts up to 2^24 exact).
        A score is one function of the triple, whichever side is ranked: the evaluator checks a batch's
        scores against :meth:`score_triples` (a side-dependent score failed that check)."""
        self._check_fitted()
        return torch.from_numpy(self._rows(side, anchor.cpu().numpy(), r.cpu().numpy()).astype(np.float32))

    def _prepared(self, side: str, anchor: torch.Tensor, r: torch.Tensor) -> PreparedQueries:
        # the rows are built once per batch and sliced per entity chunk: the evaluator's chunk walkers
        # would otherwise rebuild every whole row for each chunk (WN18's marginal baseline: 170 s)
        return PreparedQueries(_columns, self._score_rows("tail" if side == "tails" else "head", anchor, r))

    def _score_tails(self, h, r, cand, out=None):
        return self._scores("tail", h, r, cand, out)

    def _score_heads(self, r, t, cand, out=None):
        return self._scores("head", t, r, cand, out)

    def _score_triples(self, h, r, t):
        rows = self._scores("tail", h, r, None)
        return rows.gather(1, t.view(-1, 1).cpu()).view(-1)

    def prepare_heads(self, relations, tails):
        r = _as_index(relations, "relations", self.num_relations, self.device)
        t = _as_index(tails, "tails", self.num_entities, self.device)
        self._same_length(r, t)
        return self._prepared("heads", t, r)


def _columns(cand, out, rows: torch.Tensor) -> torch.Tensor:
    """The candidates' columns of score rows (``cand``: None, a slice or an index tensor), into ``out`` if given."""
    if cand is not None:
        rows = rows[:, cand] if isinstance(cand, slice) else rows.index_select(1, cand)
    if out is not None:
        out.copy_(rows)
        return out
    return rows


def _grouped(keys: np.ndarray, values: np.ndarray, weights: np.ndarray | None = None):
    """``keys`` sorted with their ``values`` (and ``weights``): a lookup table for :func:`_lookup`."""
    order = np.argsort(keys, kind="stable")
    out = [keys[order], values[order]]
    return out + ([weights[order]] if weights is not None else [])


def _lookup(sorted_keys: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(query row, position in sorted_keys)`` of every match of every query key (vectorised ranges)."""
    lo = np.searchsorted(sorted_keys, queries, side="left")
    hi = np.searchsorted(sorted_keys, queries, side="right")
    lengths = hi - lo
    rows = np.repeat(np.arange(len(queries)), lengths)
    starts = np.repeat(lo - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return rows, starts + np.arange(lengths.sum())


class PopularityBaseline(Baseline):
    """``score = deg(candidate)``: its number of training triples, as head or tail (module docstring)."""

    name = "popularity"
    _buffers_ = ("degree_count",)

    def _count(self, triples):
        deg = np.bincount(triples[:, [0, 2]].reshape(-1), minlength=self.num_entities).astype(np.float64)
        return {"degree_count": deg}

    def _rows(self, side, anchors, relations):
        degree = self.degree_count.numpy().astype(np.float32)
        return degree[anchors][:, None] + degree[None, :]


class MarginalBaseline(Baseline):
    """``score = #{(x, r, candidate)}`` (tail queries) or ``#{(candidate, r, x)}`` (head queries) in training."""

    name = "marginal"
    _buffers_ = ("tail_key", "tail_entity", "tail_count", "head_key", "head_entity", "head_count")

    def _count(self, triples):
        out = {}
        for side, column in (("tail", 2), ("head", 0)):
            pairs, counts = np.unique(triples[:, [1, column]], axis=0, return_counts=True)  # sorted by relation
            out[f"{side}_key"], out[f"{side}_entity"] = pairs[:, 0], pairs[:, 1]
            out[f"{side}_count"] = counts.astype(np.float64)
        return out

    def _rows(self, side, anchors, relations):
        keys, entities, counts = (getattr(self, f"{side}_{n}").numpy() for n in ("key", "entity", "count"))
        rows = np.empty((len(relations), self.num_entities), dtype=np.float32)
        for r in np.unique(relations):  # one dense row per relation of the batch, copied to its queries
            lo, hi = np.searchsorted(keys, [r, r + 1])
            row = np.zeros(self.num_entities, dtype=np.float32)
            row[entities[lo:hi]] = counts[lo:hi]
            rows[relations == r] = row
        # the anchor's own frequency on the other side of r: the same for every candidate of the row
        other = "head" if side == "tail" else "tail"
        keys, entities, counts = (getattr(self, f"{other}_{n}").numpy() for n in ("key", "entity", "count"))
        row, at = _lookup(keys * self.num_entities + entities, relations * self.num_entities + anchors)
        rows[row] += counts[at][:, None]  # at most one match per row: (r, anchor) keys are distinct
        return rows


class RuleBaseline(Baseline):
    """``score = 1`` when a mined inverse/duplicate rule implies the triple from a training triple (module docstring).

    Parameters
    ----------
    threshold : float
        the confidence a rule needs: the share of its body relation's training pairs whose implied triple is a
        training triple (0.8, the default of ConvE's ``check_for_reversible_relations``; a random split lowers the
        confidence of an exact inverse rule measured on training alone to about the training share, 0.93 on WN18,
        so a threshold of 0.99 finds none there).
    """

    name = "rule"
    _buffers_ = ("rule_head", "rule_body", "rule_inverse", "out_key", "out_entity", "in_key", "in_entity")

    def __init__(self, num_entities: int, num_relations: int, *, dim: int = 1, inverse_relations: bool = False,
                 threshold: float = DEFAULT_THRESHOLD):
        super().__init__(num_entities, num_relations, dim=dim, inverse_relations=inverse_relations)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
            raise InvalidInputError(f"threshold must be a number in (0, 1], got {threshold!r}")
        self.threshold = float(threshold)
        self.hparams = {"threshold": self.threshold}

    def rules(self) -> list[tuple[int, int, str]]:
        """The mined rules as ``(body relation r', head relation r, "inverse" | "duplicate")``."""
        self._check_fitted()
        return [(int(b), int(h), "inverse" if inv else "duplicate")
                for h, b, inv in zip(self.rule_head.tolist(), self.rule_body.tolist(), self.rule_inverse.tolist())]

    def _count(self, triples):
        from ..data.diagnostics import relation_matrices

        rel, inv, size = relation_matrices(triples, self.num_relations)
        found = []
        for inverse, product in ((True, inv @ rel.T), (False, rel @ rel.T)):
            product = product.tocoo()  # [r', r]: pairs of r' that imply a training triple of r
            body, head, hits = product.row, product.col, product.data
            keep = hits >= self.threshold * size[body]
            if not inverse:
                keep &= body != head  # r => r is no rule
            found.append(np.stack([head[keep], body[keep], np.full(keep.sum(), inverse)], axis=1))
        rules = np.concatenate(found).astype(np.int64)
        rules = rules[np.lexsort((rules[:, 2], rules[:, 1], rules[:, 0]))]
        e = self.num_entities
        out_key, out_entity = _grouped(triples[:, 1] * e + triples[:, 0], triples[:, 2])  # (r, h) -> t
        in_key, in_entity = _grouped(triples[:, 1] * e + triples[:, 2], triples[:, 0])  # (r, t) -> h
        return {"rule_head": rules[:, 0], "rule_body": rules[:, 1], "rule_inverse": rules[:, 2],
                "out_key": out_key, "out_entity": out_entity, "in_key": in_key, "in_entity": in_entity}

    def _rows(self, side, anchors, relations):
        """Tail query (h, r): duplicate rules give {t: (h, r', t)} (``out`` at (r', h)), inverse rules
        {t: (t, r', h)} (``in`` at (r', h)); a head query (r, t) the mirror image."""
        e = self.num_entities
        rows = np.zeros((len(relations), e), dtype=np.float32)
        head, body, inverse = (x.numpy() for x in (self.rule_head, self.rule_body, self.rule_inverse))
        query, rule = _lookup(head, relations)  # every rule whose head is the query's relation
        keys = body[rule] * e + anchors[query]
        for use_in in (True, False):
            # tail queries: inverse rules read `in`, duplicates `out`; head queries the other way round
            pick = (inverse[rule] == 1) == (use_in if side == "tail" else not use_in)
            sorted_keys, entities = (self.in_key, self.in_entity) if use_in else (self.out_key, self.out_entity)
            hit, at = _lookup(sorted_keys.numpy(), keys[pick])
            rows[query[pick][hit], entities.numpy()[at]] = 1.0
        return rows


#: the baselines by name (``kgeval pipeline --model rule``)
BASELINES: dict[str, type[Baseline]] = {cls.name: cls for cls in (PopularityBaseline, MarginalBaseline,
                                                                    RuleBaseline)}
