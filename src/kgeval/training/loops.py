"""The training driver: :func:`train` runs epochs of an :mod:`~kgeval.training.epochs` strategy,
with early stopping, a per-epoch callback and a progress bar.

``train(model, triples, config=None, **overrides)`` takes its options as a
:class:`~kgeval.training.TrainingConfig` and/or as keyword arguments named like its fields
(``train(model, triples, epochs=5, lr=0.01)`` is ``train(model, triples, TrainingConfig(epochs=5, lr=0.01))``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from .._validation import check_positive_int
from ..errors import InvalidInputError
from ..triples import as_triples, check_ids
from .config import OPTIMIZERS, TrainingConfig
from .epochs import TrainingTriples, make_epoch
from .stopping import EarlyStopper


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
    #: which validation value selected the model, in words (None without early stopping)
    selected_by: str | None = None
    #: the validation metric filtered with test at the best epoch, and per evaluation (when recorded)
    best_metric_with_test: float | None = None
    records: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "losses": list(self.losses), "epochs_run": self.epochs_run, "stopped_early": self.stopped_early,
            "best_epoch": self.best_epoch, "best_metric": self.best_metric, "seconds": self.seconds,
            "seconds_per_epoch": self.seconds_per_epoch, "metric_history": [list(x) for x in self.metric_history],
            **({} if self.selected_by is None else {"selected_by": self.selected_by}),
            **({} if not self.records or self.records[0]["filtered_with_test"] is None else {
                "best_metric_with_test": self.best_metric_with_test, "validation_records": list(self.records)}),
        }


def _check_triples(triples, num_entities: int, num_relations: int) -> torch.Tensor:
    arr = as_triples("training triples", triples)
    check_ids("training triples", arr, num_entities, num_relations)
    return torch.from_numpy(arr)


def _graph_sizes(model, num_entities: int | None) -> tuple[int, int]:
    """``(entities, relations)`` of the graph ``model`` is trained on."""
    n_ent = int(getattr(model, "num_entities", 0) or 0)
    if num_entities is not None:
        check_positive_int("num_entities", num_entities)
        if n_ent and num_entities != n_ent:
            raise InvalidInputError(f"num_entities={num_entities} but the model has {n_ent} entities")
        n_ent = int(num_entities)
    if n_ent < 1:
        raise InvalidInputError("num_entities is unknown: pass num_entities= or a model with .num_entities")
    n_rel = getattr(model, "num_relations", None)
    if n_rel is None:
        raise InvalidInputError("the model has no .num_relations")
    if not callable(getattr(model, "parameters", None)) or next(iter(model.parameters()), None) is None:
        raise InvalidInputError(f"{type(model).__name__} has no trainable parameters (train a torch.nn.Module)")
    return n_ent, n_rel


def _as_config(config, overrides: Mapping) -> TrainingConfig:
    if config is None:
        config = TrainingConfig()
    elif isinstance(config, Mapping):
        config = TrainingConfig.from_dict(config)
    elif not isinstance(config, TrainingConfig):
        raise InvalidInputError(f"config must be a TrainingConfig, a mapping or None, got {type(config).__name__}")
    return config.replace(**overrides) if overrides else config


def train(model, triples, config: TrainingConfig | Mapping | None = None, *, num_entities: int | None = None,
          stopper: EarlyStopper | None = None, callback: Callable[[int, float, object], object] | None = None,
          progress: bool = True, **overrides) -> TrainingResult:
    """Train ``model`` on ``triples`` (an (n, 3) array of (head, relation, tail) ids).

    ``config``: a :class:`~kgeval.training.TrainingConfig` (or its dict); ``overrides``: any of
    its fields as keywords, applied on top (``loop``, ``loss``, ``loss_kwargs``, ``optimizer``,
    ``lr``, ``epochs``, ``batch_size``, ``num_negatives``, ``label_smoothing``, ``regularizer``,
    ``regularizer_weight``, ``seed``; see the class for their meaning). ``seed`` makes the run
    reproducible on CPU (shuffling, negatives, dropout) without changing the caller's global RNG state.

    ``num_entities``: needed only when the model has no ``.num_entities``. ``stopper``: an
    :class:`EarlyStopper`; its best weights are restored at the end. ``callback(epoch, loss, model)``
    runs after every epoch; a truthy return value stops training (reported as ``stopped_early``).

    The model is left in ``eval()`` mode.
    """
    start = time.perf_counter()
    n_ent, n_rel = _graph_sizes(model, num_entities)
    config = _as_config(config, overrides)
    if stopper is not None and not isinstance(stopper, EarlyStopper):
        raise InvalidInputError(f"stopper must be an EarlyStopper or None, got {type(stopper).__name__}")
    if callback is not None and not callable(callback):
        raise InvalidInputError("callback must be callable")
    data = TrainingTriples.of(model, _check_triples(triples, n_ent, n_rel), n_ent, n_rel)
    epoch = make_epoch(model, data, config)

    seeded = config.seed is not None
    with torch.random.fork_rng(devices=[]) if seeded else contextlib.nullcontext():
        if seeded:
            torch.manual_seed(config.seed)
        generator = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
        optimizer = OPTIMIZERS[config.optimizer](model.parameters(), lr=config.learning_rate)
        result = _fit(model, epoch, optimizer, generator, epochs=config.epochs, stopper=stopper, callback=callback,
                      progress=progress, probe=_probe_triples(data))
    result.seconds = time.perf_counter() - start
    return result


#: training triples whose scores are checked to be finite after every epoch (:func:`_check_finite`)
PROBE_TRIPLES = 256


def _probe_triples(data: TrainingTriples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first :data:`PROBE_TRIPLES` training triples (the inverse copies come after them)."""
    n = min(PROBE_TRIPLES, int(data.head.numel()))
    return data.head[:n], data.relation[:n], data.tail[:n]


def _check_finite(model, probe, epoch: int) -> None:
    """Refuse weights that diverged in the epoch's last steps, after its losses were computed: a NaN/inf
    parameter, or finite weights so large that scores overflow (DistMult entries ~1e15 give h*r*t ~1e45,
    inf in float32). Such a model reached the evaluation, which ranked inf scores as ties (an MRR from
    overflowed scores) or blamed NaN scores on the evaluation and offered nan_policy='worst'. Scores
    are taken in eval mode (no dropout, so no random numbers are drawn) without gradients."""
    for name, param in model.named_parameters():
        if (param.is_floating_point() or param.is_complex()) and not bool(torch.isfinite(param.detach()).all()):
            raise InvalidInputError(f"training diverged: parameter {name!r} holds NaN or infinite values after "
                                    f"epoch {epoch}; lower the learning rate")
    score = getattr(model, "score_triples", None)
    if score is None or probe[0].numel() == 0:
        return
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            device = next(model.parameters()).device
            scores = score(*(x.to(device) for x in probe))
    finally:
        model.train(was_training)
    if isinstance(scores, torch.Tensor) and not bool(torch.isfinite(scores).all()):
        bad = scores[~torch.isfinite(scores)][0].item()
        raise InvalidInputError(f"training diverged: after epoch {epoch} the model scores training triples as "
                                f"{bad} (its weights overflow float arithmetic); lower the learning rate")


def _fit(model, epoch_strategy, optimizer, generator, *, epochs: int, stopper, callback, progress,
         probe=None) -> TrainingResult:
    """Run up to ``epochs`` epochs; stop when the stopper or the callback says so."""
    if stopper is not None:
        stopper.reset()
    result = TrainingResult()
    train_seconds = 0.0
    bar = tqdm(range(1, epochs + 1), desc="training", unit="epoch", disable=not progress, leave=False)
    for epoch in bar:
        model.train()
        t0 = time.perf_counter()
        epoch_loss = epoch_strategy.run_epoch(model, optimizer, generator)
        if not np.isfinite(epoch_loss):
            raise InvalidInputError(f"training diverged: loss is {epoch_loss} in epoch {epoch}; lower the learning rate")
        if probe is not None:
            _check_finite(model, probe, epoch)
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
        result.selected_by, result.records = stopper.selected_by, list(stopper.records)
        result.best_metric_with_test = stopper.best_metric_with_test
    model.eval()
    result.seconds_per_epoch = train_seconds / max(1, result.epochs_run)
    return result
