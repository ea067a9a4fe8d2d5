"""The training loop: :func:`train` with LCWA (1-to-all) or sLCWA (negative sampling) batches.

LCWA (local closed world assumption, PyKEEN's ``LCWATrainingLoop``): training triples are
grouped into unique queries ``(h, r, ?)`` (and ``(?, r, t)``) whose multi-hot label row marks
every known answer; each query is scored against all entities with one ``score_tails`` /
``score_heads`` call. With ``model.inverse_relations`` the inverse triples ``(t, r + R, h)``
are added and only tail queries are used.

sLCWA (stochastic LCWA, ``SLCWATrainingLoop``): each training triple is paired with
``num_negatives`` corruptions that replace the head or the tail (each with probability 1/2)
by a uniformly drawn different entity; negatives are not filtered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from ..errors import InvalidInputError, unknown_name
from ..triples import as_triples, check_ids
from .losses import lcwa_labels, regularization, resolve_loss, resolve_regularizer
from .stopping import EarlyStopper

OPTIMIZERS = {"adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad}
DEFAULT_LR = {"adam": 1e-3, "adagrad": 1e-2}
LOOPS = ("lcwa", "slcwa")
#: sLCWA scores negatives by gathering from 1-to-all scores when num_entities <= this * num_negatives
GATHER_NEGATIVES_RATIO = 4


@dataclass
class TrainingResult:
    """What :func:`train` did. ``losses[i]`` is the mean batch loss of epoch ``i + 1``."""

    losses: list[float] = field(default_factory=list)
    epochs_run: int = 0
    stopped_early: bool = False
    best_epoch: int | None = None
    best_metric: float | None = None
    #: wall-clock seconds of the whole call (training and stopper evaluations)
    seconds: float = 0.0
    #: training seconds per epoch, stopper evaluations excluded
    seconds_per_epoch: float = 0.0
    #: ``(epoch, value)`` of each early-stopping evaluation
    metric_history: list[tuple[int, float]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "losses": list(self.losses), "epochs_run": self.epochs_run, "stopped_early": self.stopped_early,
            "best_epoch": self.best_epoch, "best_metric": self.best_metric, "seconds": self.seconds,
            "seconds_per_epoch": self.seconds_per_epoch, "metric_history": [list(x) for x in self.metric_history],
        }


def _check_triples(triples, num_entities: int, num_relations: int) -> torch.Tensor:
    arr = as_triples("training triples", triples)
    check_ids("training triples", arr, num_entities, num_relations)
    return torch.from_numpy(arr)


def _positive_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidInputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


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
        starts, counts = self.ptr[q], self.ptr[q + 1] - self.ptr[q]
        rows = torch.repeat_interleave(torch.arange(q.numel()), counts)
        offsets = torch.arange(int(counts.sum())) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        return rows, self.answers[torch.repeat_interleave(starts, counts) + offsets]


def train(model, triples, *, num_entities: int | None = None, loop: str = "lcwa", loss: str | None = None,
          loss_kwargs: dict | None = None, optimizer: str = "adam", lr: float | None = None, epochs: int = 100,
          batch_size: int = 256, num_negatives: int = 1, label_smoothing: float = 0.0,
          regularizer: str | None = None, regularizer_weight: float = 0.01, stopper: EarlyStopper | None = None,
          seed: int | None = None, progress: bool = True,
          callback: Callable[[int, float, object], object] | None = None) -> TrainingResult:
    """Train ``model`` on ``triples`` (an (n, 3) array of (head, relation, tail) ids).

    ``loop``: ``"lcwa"`` (1-to-all BCE/softmax over all entities) or ``"slcwa"`` (negative
    sampling; ``num_negatives`` corruptions per triple). ``loss``: see
    :mod:`kgeval.training.losses` (default ``bce`` for LCWA, ``nssa`` for sLCWA), options via
    ``loss_kwargs`` (e.g. ``{"margin": 6.0, "temperature": 0.5}``). ``optimizer``: ``adam``
    (default ``lr`` 1e-3) or ``adagrad`` (1e-2). ``label_smoothing`` (LCWA): labels become
    ``y (1 - eps) + eps / num_entities``. ``regularizer``: ``"l2"`` or ``"n3"`` on the
    embeddings of the batch triples (:meth:`Model.factors`), times ``regularizer_weight``.
    ``stopper``: an :class:`EarlyStopper`; its best weights are restored at the end.
    ``seed``: makes the run reproducible on CPU (shuffling, negatives, dropout) without
    changing the caller's global RNG state. ``callback(epoch, loss, model)`` runs after every
    epoch; a truthy return value stops training (reported as ``stopped_early``).

    The model is left in ``eval()`` mode.
    """
    start = time.perf_counter()
    n_ent = int(getattr(model, "num_entities", 0) or 0)
    if num_entities is not None:
        _positive_int("num_entities", num_entities)
        if n_ent and num_entities != n_ent:
            raise InvalidInputError(f"num_entities={num_entities} but the model has {n_ent} entities")
        n_ent = int(num_entities)
    if n_ent < 1:
        raise InvalidInputError("num_entities is unknown: pass num_entities= or a model with .num_entities")
    n_rel = getattr(model, "num_relations", None)
    if n_rel is None:
        raise InvalidInputError("the model has no .num_relations")
    loop_key = str(loop).lower()
    if loop_key not in LOOPS:
        raise unknown_name("training loop", loop, LOOPS)
    loss_name, loss_fn = resolve_loss(loss, loop_key, loss_kwargs)
    opt_key = str(optimizer).lower()
    if opt_key not in OPTIMIZERS:
        raise unknown_name("optimizer", optimizer, OPTIMIZERS)
    reg = resolve_regularizer(regularizer)
    epochs = _positive_int("epochs", epochs)
    batch_size = _positive_int("batch_size", batch_size)
    num_negatives = _positive_int("num_negatives", num_negatives)
    lr = DEFAULT_LR[opt_key] if lr is None else lr
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not lr > 0:
        raise InvalidInputError(f"lr must be a positive number, got {lr!r}")
    if not isinstance(label_smoothing, (int, float)) or not 0 <= label_smoothing < 1:
        raise InvalidInputError(f"label_smoothing must be in [0, 1), got {label_smoothing!r}")
    if not isinstance(regularizer_weight, (int, float)) or regularizer_weight < 0:
        raise InvalidInputError(f"regularizer_weight must be a non-negative number, got {regularizer_weight!r}")
    if stopper is not None and not isinstance(stopper, EarlyStopper):
        raise InvalidInputError(f"stopper must be an EarlyStopper or None, got {type(stopper).__name__}")
    if callback is not None and not callable(callback):
        raise InvalidInputError("callback must be callable")
    mapped = _check_triples(triples, n_ent, n_rel)

    fork = torch.random.fork_rng(devices=[]) if seed is not None else _Null()
    with fork:
        if seed is not None:
            torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
        return _run(model, mapped, n_ent, n_rel, loop_key, loss_fn, opt_key, float(lr), epochs, batch_size,
                    num_negatives, float(label_smoothing), reg, float(regularizer_weight), stopper, progress,
                    callback, gen, start)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _run(model, triples, n_ent, n_rel, loop, loss_fn, opt_key, lr, epochs, batch_size, num_negatives,
         label_smoothing, reg, reg_weight, stopper, progress, callback, gen, start) -> TrainingResult:
    device = next(model.parameters()).device
    inverse = bool(getattr(model, "inverse_relations", False))
    h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
    if inverse:  # train on (h, r, t) and (t, r + R, h); head side comes for free
        h, r, t = torch.cat([h, t]), torch.cat([r, r + n_rel]), torch.cat([t, h])
    if reg is not None and not hasattr(model, "factors"):
        raise InvalidInputError(f"regularizer {reg!r} needs a model with .factors(); use a kgeval model")
    opt = OPTIMIZERS[opt_key](model.parameters(), lr=lr)
    post_update = getattr(model, "post_parameter_update", None)

    # sLCWA: gather negatives from 1-to-all scores when that is cheaper (n <= 4k: one b x n
    # matmul beats b x k elementwise triple scores) and exact
    # (without inverse relations score_heads(r, t)[h'] is the triple score of (h', r, t))
    gather_negatives = loop == "slcwa" and not inverse and n_ent <= GATHER_NEGATIVES_RATIO * num_negatives \
        and getattr(model, "one_to_all_is_cheap", False)
    if loop == "lcwa":
        sides = [("tail", _Queries(h, r, t, 2 * n_rel if inverse else n_rel))]
        if not inverse:
            sides.append(("head", _Queries(t, r, h, n_rel)))
    if stopper is not None:
        stopper.reset()

    result = TrainingResult()
    train_seconds = 0.0
    bar = tqdm(range(1, epochs + 1), desc="training", unit="epoch", disable=not progress, leave=False)
    for epoch in bar:
        model.train()
        t0 = time.perf_counter()
        total, count = 0.0, 0
        if loop == "lcwa":
            batches = []
            for side_idx, (_, queries) in enumerate(sides):
                perm = torch.randperm(len(queries), generator=gen)
                batches += [(side_idx, perm[i:i + batch_size]) for i in range(0, len(queries), batch_size)]
            order = torch.randperm(len(batches), generator=gen).tolist()
            for bi in order:
                side_idx, q = batches[bi]
                side, queries = sides[side_idx]
                rows, cols = queries.targets(q)
                anchor, rel = queries.anchor[q].to(device), queries.relation[q].to(device)
                if side == "tail":
                    scores = model.score_tails(anchor, rel)
                else:
                    scores = model.score_heads(rel, anchor)
                labels = lcwa_labels(scores, rows.to(device), cols.to(device), label_smoothing, n_ent)
                value = loss_fn(scores, labels)
                if reg is not None and reg_weight:
                    a, rr, c = anchor[rows.to(device)], rel[rows.to(device)], cols.to(device)
                    fac = model.factors(a, rr, c) if side == "tail" else model.factors(c, rr, a)
                    value = value + reg_weight * regularization(reg, fac)
                opt.zero_grad(set_to_none=True)
                value.backward()
                opt.step()
                if post_update is not None:
                    post_update()
                total += float(value.detach()) * q.numel()
                count += q.numel()
        else:
            perm = torch.randperm(h.numel(), generator=gen)
            for i in range(0, h.numel(), batch_size):
                idx = perm[i:i + batch_size]
                b = idx.numel()
                ph, pr, pt = h[idx], r[idx], t[idx]
                nh, nr, nt = ph.repeat_interleave(num_negatives), pr.repeat_interleave(num_negatives), \
                    pt.repeat_interleave(num_negatives)
                corrupt_head = torch.rand(nh.numel(), generator=gen) < 0.5
                # a uniformly drawn *different* entity: draw from n-1 values and skip the original
                original = torch.where(corrupt_head, nh, nt)
                draw = torch.randint(0, max(1, n_ent - 1), (nh.numel(),), generator=gen)
                draw = draw + (draw >= original).long() if n_ent > 1 else original
                nh = torch.where(corrupt_head, draw, nh)
                nt = torch.where(corrupt_head, nt, draw)
                pos = model.score_triples(ph.to(device), pr.to(device), pt.to(device))
                if gather_negatives:
                    # few entities: score all of them with the 1-to-all matmul paths and pick the
                    # sampled columns -- cheaper than scoring b * k triples one by one
                    rows = torch.arange(b).repeat_interleave(num_negatives).to(device)
                    tails_all = model.score_tails(ph.to(device), pr.to(device))
                    heads_all = model.score_heads(pr.to(device), pt.to(device))
                    draw_d, corrupt_d = draw.to(device), corrupt_head.to(device)
                    neg = torch.where(corrupt_d, heads_all[rows, draw_d], tails_all[rows, draw_d])
                    neg = neg.view(b, num_negatives)
                else:
                    neg = model.score_triples(nh.to(device), nr.to(device), nt.to(device)).view(b, num_negatives)
                value = loss_fn(pos, neg)
                if reg is not None and reg_weight:
                    value = value + reg_weight * regularization(reg, model.factors(ph.to(device), pr.to(device),
                                                                                   pt.to(device)))
                opt.zero_grad(set_to_none=True)
                value.backward()
                opt.step()
                if post_update is not None:
                    post_update()
                total += float(value.detach()) * b
                count += b
        epoch_loss = total / max(1, count)
        if not np.isfinite(epoch_loss):
            raise InvalidInputError(f"training diverged: loss is {epoch_loss} in epoch {epoch}; lower the learning rate")
        train_seconds += time.perf_counter() - t0
        result.losses.append(epoch_loss)
        result.epochs_run = epoch
        bar.set_postfix(loss=f"{epoch_loss:.4g}", s_per_epoch=f"{train_seconds / epoch:.3g}")
        stop = False
        if stopper is not None and stopper.should_evaluate(epoch):
            stop = stopper.evaluate(model, epoch)
            bar.set_postfix(loss=f"{epoch_loss:.4g}", metric=f"{stopper.history[-1][1]:.4g}")
        if callback is not None and callback(epoch, epoch_loss, model):
            stop = True
        if stop:
            result.stopped_early = epoch < epochs
            break
    bar.close()
    if stopper is not None:
        stopper.restore_best(model)
        result.best_epoch, result.best_metric = stopper.best_epoch, stopper.best_metric
        result.metric_history = list(stopper.history)
    model.eval()
    result.seconds = time.perf_counter() - start
    result.seconds_per_epoch = train_seconds / max(1, result.epochs_run)
    return result
