"""One training epoch, two strategies behind ``run_epoch(model, optimizer, generator) -> mean loss``.

:class:`LcwaEpoch` (local closed world assumption, PyKEEN's ``LCWATrainingLoop``): training
triples are grouped into unique queries ``(h, r, ?)`` (and ``(?, r, t)``) whose multi-hot label
row marks every known answer; each query is scored against all entities with one
``score_tails`` / ``score_heads`` call. With ``model.inverse_relations`` the inverse triples
``(t, r + R, h)`` are added and only tail queries are used.

:class:`SlcwaEpoch` (stochastic LCWA, ``SLCWATrainingLoop``): each training triple is paired with
``num_negatives`` corruptions that replace the head or the tail (each with probability 1/2) by a
uniformly drawn different entity; negatives are not filtered.

The epoch loss is the mean of the batch losses weighted by batch size (queries for LCWA,
triples for sLCWA). All randomness comes from the ``generator`` argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._csr import csr_pairs
from .._validation import Side, check_score_tensor
from ..errors import InvalidInputError
from .config import TrainingConfig
from .losses import lcwa_labels, regularization

#: sLCWA scores negatives by gathering from 1-to-all scores when num_entities <= this * num_negatives
GATHER_NEGATIVES_RATIO = 4
#: most negatives one sLCWA batch may draw: each costs ~70 bytes of ids, flags and scores (plus the
#: model's activations), so 2^26 is already ~5 GB; more is refused up front instead of failing
#: inside torch with an out-of-memory error
MAX_NEGATIVES_PER_BATCH = 1 << 26


@dataclass(frozen=True)
class TrainingTriples:
    """The id triples an epoch iterates over (CPU tensors), with the inverse triples when the model uses them."""

    head: torch.Tensor
    relation: torch.Tensor
    tail: torch.Tensor
    num_entities: int
    #: relations of the training graph (without the inverse copies)
    num_relations: int
    inverse: bool

    @classmethod
    def of(cls, model, triples: torch.Tensor, num_entities: int, num_relations: int) -> TrainingTriples:
        """``triples`` (validated ``(n, 3)`` int64) as seen by ``model``."""
        inverse = bool(getattr(model, "inverse_relations", False))
        h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
        if inverse:  # train on (h, r, t) and (t, r + R, h); the head side comes for free
            h, r, t = torch.cat([h, t]), torch.cat([r, r + num_relations]), torch.cat([t, h])
        return cls(h, r, t, int(num_entities), int(num_relations), inverse)


class Penalty:
    """``weight * regularization(kind, model.factors(h, r, t))``; false when there is nothing to add."""

    def __init__(self, model, kind: str | None, weight: float):
        if kind is not None and not hasattr(model, "factors"):
            raise InvalidInputError(f"regularizer {kind!r} needs a model with .factors(); use a kgeval model")
        self.kind, self.weight = kind, weight

    def __bool__(self) -> bool:
        return self.kind is not None and bool(self.weight)

    def __call__(self, model, h, r, t) -> torch.Tensor:
        return self.weight * regularization(self.kind, model.factors(h, r, t))


def _check_shape(what: str, scores: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Refuse scores of the wrong shape, layout (sparse), device (meta) or dtype with the method's name
    (torch would fail deep inside the loss: "Cannot assign to a sparse tensor")."""
    check_score_tensor(f"the model's {what}", scores, shape)
    return scores


def _update(model, optimizer, value: torch.Tensor) -> None:
    """One optimiser step on ``value``, then the model's parameter constraints (e.g. unit norms)."""
    optimizer.zero_grad(set_to_none=True)
    value.backward()
    optimizer.step()
    post_update = getattr(model, "post_parameter_update", None)
    if post_update is not None:
        post_update()


class _Queries:
    """Unique ``(anchor, relation)`` queries of one side with their answers in CSR form."""

    def __init__(self, anchor: torch.Tensor, relation: torch.Tensor, answer: torch.Tensor, num_relations: int):
        key = anchor * num_relations + relation
        uniq, inverse = torch.unique(key, return_inverse=True)
        order = torch.argsort(inverse, stable=True)
        self.anchor = uniq // num_relations
        self.relation = uniq % num_relations
        self.answers = answer[order]
        counts = torch.bincount(inverse, minlength=uniq.numel())
        self.ptr = torch.zeros(uniq.numel() + 1, dtype=torch.long)
        self.ptr[1:] = torch.cumsum(counts, 0)

    def __len__(self):
        return self.anchor.numel()

    def targets(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(row in batch, answer entity) pairs of the batch queries ``q``."""
        rows, positions = csr_pairs(self.ptr[q], self.ptr[q + 1] - self.ptr[q])
        return rows, self.answers[positions]


class LcwaEpoch:
    """1-to-all batches of unique queries of both sides (tail side only with inverse relations)."""

    def __init__(self, model, data: TrainingTriples, config: TrainingConfig):
        self.num_entities = data.num_entities
        self.batch_size, self.label_smoothing = config.batch_size, config.label_smoothing
        self.loss_fn = config.loss_function()
        self.penalty = Penalty(model, config.regularizer, config.regularizer_weight)
        num_keyed = 2 * data.num_relations if data.inverse else data.num_relations
        self.sides = [(Side.TAIL, _Queries(data.head, data.relation, data.tail, num_keyed))]
        if not data.inverse:
            self.sides.append((Side.HEAD, _Queries(data.tail, data.relation, data.head, data.num_relations)))

    def _batches(self, generator) -> list[tuple[int, torch.Tensor]]:
        """``(side index, query ids)`` batches: each side shuffled, then the batches of both sides shuffled."""
        batches = []
        for side_idx, (_, queries) in enumerate(self.sides):
            perm = torch.randperm(len(queries), generator=generator)
            batches += [(side_idx, perm[i:i + self.batch_size]) for i in range(0, len(queries), self.batch_size)]
        order = torch.randperm(len(batches), generator=generator).tolist()
        return [batches[i] for i in order]

    def _batch_loss(self, model, side: Side, queries: _Queries, q: torch.Tensor) -> torch.Tensor:
        device = next(model.parameters()).device
        rows, cols = queries.targets(q)
        rows, cols = rows.to(device), cols.to(device)
        anchor, rel = queries.anchor[q].to(device), queries.relation[q].to(device)
        scores = model.score_tails(anchor, rel) if side is Side.TAIL else model.score_heads(rel, anchor)
        _check_shape("score_tails" if side is Side.TAIL else "score_heads", scores, (q.numel(), self.num_entities))
        value = self.loss_fn(scores, lcwa_labels(scores, rows, cols), self.label_smoothing)
        if self.penalty:
            a, r = anchor[rows], rel[rows]
            value = value + (self.penalty(model, a, r, cols) if side is Side.TAIL else self.penalty(model, cols, r, a))
        return value

    def run_epoch(self, model, optimizer, generator) -> float:
        total, count = 0.0, 0
        for side_idx, q in self._batches(generator):
            value = self._batch_loss(model, *self.sides[side_idx], q)
            _update(model, optimizer, value)
            total += float(value.detach()) * q.numel()
            count += q.numel()
        return total / max(1, count)


class SlcwaEpoch:
    """Shuffled batches of training triples, each with ``num_negatives`` random corruptions."""

    def __init__(self, model, data: TrainingTriples, config: TrainingConfig):
        self.data = data
        self.batch_size, self.num_negatives = config.batch_size, config.num_negatives
        if data.num_entities < 2:  # the only corruption of a triple would be the triple itself
            raise InvalidInputError(f"sLCWA needs at least 2 entities to draw negatives, the graph has "
                                    f"{data.num_entities}; use loop='lcwa'")
        b = min(config.batch_size, int(data.head.numel()))
        if b * config.num_negatives > MAX_NEGATIVES_PER_BATCH:
            raise InvalidInputError(
                f"sLCWA: batch_size x num_negatives = {b} x {config.num_negatives} = {b * config.num_negatives:,} "
                f"negatives per batch, more than {MAX_NEGATIVES_PER_BATCH:,} fit in memory; lower batch_size or "
                "num_negatives (or use loop='lcwa', which scores every entity without drawing negatives)"
            )
        self.loss_fn = config.loss_function()
        self.penalty = Penalty(model, config.regularizer, config.regularizer_weight)
        # gather negatives from 1-to-all scores when that is cheaper (n <= 4k: one b x n matmul beats
        # b x k elementwise triple scores) and exact (without inverse relations score_heads(r, t)[h']
        # is the triple score of (h', r, t))
        self.gather = not data.inverse and data.num_entities <= GATHER_NEGATIVES_RATIO * config.num_negatives \
            and getattr(model, "one_to_all_is_cheap", False)

    def _corrupt(self, h, r, t, generator):
        """Per triple ``num_negatives`` copies with the head or the tail replaced by another entity;
        returns the negatives, which side was replaced and the drawn entity."""
        k, n_ent = self.num_negatives, self.data.num_entities
        nh, nr, nt = h.repeat_interleave(k), r.repeat_interleave(k), t.repeat_interleave(k)
        corrupt_head = torch.rand(nh.numel(), generator=generator) < 0.5
        # a uniformly drawn *different* entity: draw from n-1 values and skip the original
        original = torch.where(corrupt_head, nh, nt)
        draw = torch.randint(0, n_ent - 1, (nh.numel(),), generator=generator)
        draw = draw + (draw >= original).long()
        return (torch.where(corrupt_head, draw, nh), nr, torch.where(corrupt_head, nt, draw)), corrupt_head, draw

    def _batch_loss(self, model, idx: torch.Tensor, generator) -> torch.Tensor:
        device = next(model.parameters()).device
        b, k = idx.numel(), self.num_negatives
        ph, pr, pt = self.data.head[idx], self.data.relation[idx], self.data.tail[idx]
        (nh, nr, nt), corrupt_head, draw = self._corrupt(ph, pr, pt, generator)
        ph, pr, pt = ph.to(device), pr.to(device), pt.to(device)
        pos = _check_shape("score_triples", model.score_triples(ph, pr, pt), (b,))
        if self.gather:
            # few entities: score all of them with the 1-to-all matmul paths and pick the sampled
            # columns -- cheaper than scoring b * k triples one by one
            rows = torch.arange(b).repeat_interleave(k).to(device)
            n_ent = self.data.num_entities
            tails_all = _check_shape("score_tails", model.score_tails(ph, pr), (b, n_ent))
            heads_all = _check_shape("score_heads", model.score_heads(pr, pt), (b, n_ent))
            draw, corrupt_head = draw.to(device), corrupt_head.to(device)
            neg = torch.where(corrupt_head, heads_all[rows, draw], tails_all[rows, draw]).view(b, k)
        else:
            neg = _check_shape("score_triples", model.score_triples(nh.to(device), nr.to(device), nt.to(device)),
                               (b * k,)).view(b, k)
        value = self.loss_fn(pos, neg)
        if self.penalty:
            value = value + self.penalty(model, ph, pr, pt)
        return value

    def run_epoch(self, model, optimizer, generator) -> float:
        total, count = 0.0, 0
        perm = torch.randperm(self.data.head.numel(), generator=generator)
        for i in range(0, perm.numel(), self.batch_size):
            idx = perm[i:i + self.batch_size]
            value = self._batch_loss(model, idx, generator)
            _update(model, optimizer, value)
            total += float(value.detach()) * idx.numel()
            count += idx.numel()
        return total / max(1, count)


def make_epoch(model, data: TrainingTriples, config: TrainingConfig) -> LcwaEpoch | SlcwaEpoch:
    """The epoch strategy of ``config.loop``."""
    return (LcwaEpoch if config.loop == "lcwa" else SlcwaEpoch)(model, data, config)
