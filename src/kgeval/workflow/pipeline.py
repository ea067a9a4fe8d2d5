"""Train a model on a dataset and evaluate it, in one call: :func:`pipeline`.

``pipeline(config=None, **overrides)`` runs four stages with explicit inputs:

1. :func:`_handle_dataset` loads the dataset and resolves the restriction labels to ids;
2. :func:`_handle_model` builds the model from the (default-resolved) configuration;
3. :func:`_handle_training` trains it, with early stopping on the validation split if asked;
4. :func:`_handle_evaluation` evaluates on the configured split.

The filtering protocol is in :mod:`kgeval.workflow.evaluation`.
"""

from __future__ import annotations

import contextlib
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._threads import torch_threads
from ..data.splits import split_attribute
from ..errors import InvalidInputError, KGEvalError
from ..tracking import Trackers
from ..tracking.group import epoch_callback, log_results, tracked_run
from .config import PipelineConfig, Restriction
from .evaluation import (check_split_to_evaluate, dataset_type_constraints, evaluate_model, resolve_whitelist,
                         validation_filter_sets)
from .progress import Counter
from .replicates import ReplicateSaveError, ReplicatesResult, lost_replicate, replicate_seeds, write_summary

#: Graphs with at most this many entities train on one torch thread by default (see :func:`pipeline`).
SMALL_GRAPH_ENTITIES = 1000


@dataclass
class PipelineResult:
    """What :func:`pipeline` produced.

    ``results``: the :class:`~kgeval.Results` of the final evaluation; ``model``: the trained
    model; ``training``: the :class:`~kgeval.training.TrainingResult`; ``timings``: seconds
    spent training and evaluating; ``config``: the resolved :class:`PipelineConfig`.
    """

    results: Any
    model: Any
    training: Any
    timings: dict[str, float]
    config: PipelineConfig
    dataset: Any = field(default=None, repr=False)

    @property
    def configuration(self) -> dict[str, Any]:
        """The keyword arguments re-running this configuration: ``kgeval.pipeline(**result.configuration)``."""
        return self.config.to_kwargs()

    @property
    def losses(self) -> list[float]:
        return list(self.training.losses)

    def metadata(self) -> dict[str, Any]:
        """``config.json``'s content: configuration, versions, dataset identity and timings."""
        from .runs import dataset_identity, versions

        return {"configuration": self.config.to_dict(), "versions": versions(),
                "dataset": dataset_identity(self.dataset), "timings": self.timings}

    def save(self, directory, *, overwrite: bool = False):
        """Write the run into ``directory`` atomically (see :func:`kgeval.workflow.runs.save_run`)."""
        from .runs import save_run

        return save_run(self, directory, overwrite=overwrite)


def resolve_num_threads(num_threads: int | None, num_entities: int) -> int | None:
    """The torch thread count to use: explicit, 1 for small graphs, else None (torch's default)."""
    if num_threads is not None:
        return num_threads
    return 1 if num_entities <= SMALL_GRAPH_ENTITIES else None


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (CPU) so that a pipeline run is reproducible."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------- stages
def _handle_dataset(config: PipelineConfig, dataset, data_dir) -> tuple[Any, PipelineConfig]:
    """Load the dataset; record its reference and the restriction as ids in the configuration."""
    from ..data import get_dataset

    ds = get_dataset(dataset if dataset is not None else config.dataset, data_dir=data_dir,
                     drop_unseen=config.drop_unseen)
    rel = resolve_whitelist(config.restriction.relations, ds.relation_to_id, ds.num_relations, "relation")
    ent = resolve_whitelist(config.restriction.entities, ds.entity_to_id, ds.num_entities, "entity")
    if len(ds.training) == 0:
        raise InvalidInputError(f"dataset {ds.name!r} has no training triples")
    split = split_attribute(config.evaluation.split)
    check_split_to_evaluate(ds, split, rel, ent)
    config = config.replace(dataset=ds.reference or ds.name, restriction=Restriction(rel, ent),
                            threads=resolve_num_threads(config.threads, ds.num_entities))
    return ds, config


def _handle_stopper(config: PipelineConfig, ds):
    """The early stopper on the validation split (``None`` without early stopping) and the resolved config."""
    from ..training import EarlyStopper
    from ..training.stopping import DEFAULT_METRIC

    if config.early_stopping is None:
        return None, config
    rel, ent = config.restriction.relations, config.restriction.entities
    check_split_to_evaluate(ds, "valid", rel, ent, purpose=" (needed for early stopping)")
    options = dict(config.early_stopping.options)
    options.setdefault("metric", DEFAULT_METRIC)
    evaluation = config.evaluation.options.replace(restrict_relations=rel, restrict_entities=ent)
    if evaluation.type_constraints is not None:  # a file's labels read with the dataset's maps
        evaluation = evaluation.replace(type_constraints=dataset_type_constraints(ds, evaluation.type_constraints))
    # the stopper resolves larger_is_better from the metric (and refuses a contradiction); recorded as used
    # "filtered with test" (record or select, as LibKGE): the test split as one more filter set of validation
    test = ds.testing if options.get("filtered_with_test") else None
    if test is not None and len(test) == 0:
        raise InvalidInputError(f"early_stopping.filtered_with_test needs test triples; dataset {ds.name!r} has none")
    stopper = EarlyStopper(ds.validation, validation_filter_sets(ds), options=evaluation, test_triples=test,
                           **options)
    options["larger_is_better"] = stopper.larger_is_better
    check_stopping_schedule(stopper.frequency, config.training.epochs)
    config = config.replace(early_stopping=type(config.early_stopping)(options))
    return stopper, config


def check_stopping_schedule(frequency, epochs: int) -> None:
    """Refuse early stopping that would never evaluate: ``frequency`` > ``epochs`` trains the
    last-epoch model with no validation at all, although early stopping was asked for."""
    from ..training.stopping import DEFAULT_FREQUENCY

    frequency = DEFAULT_FREQUENCY if frequency is None else frequency
    if isinstance(frequency, int) and frequency > epochs:
        raise InvalidInputError(f"early stopping evaluates every {frequency} epochs but training runs {epochs}: "
                                "it would never evaluate; lower early_stopping.frequency (--frequency) or "
                                "raise the epochs")


def _handle_model(config: PipelineConfig, ds):
    from ..models import get_model

    seed_everything(config.seed)
    model = get_model(config.model.name, ds.num_entities, ds.num_relations, seed=config.seed, **config.model.options)
    return model if config.device is None else model.to(config.device)


def _handle_training(config: PipelineConfig, model, ds, stopper, *, progress: bool, callback):
    from ..training import train

    if not getattr(model, "trainable", True):  # a baseline (kgeval.models.baselines): counted, not trained
        from ..training.loops import TrainingResult

        if stopper is not None:
            raise InvalidInputError(f"the {model.name} baseline is not trained: early stopping has nothing to stop")
        model.fit(ds.training)
        return TrainingResult()

    return train(model, ds.training, config.training_config(), stopper=stopper, progress=progress, callback=callback)


def _handle_evaluation(config: PipelineConfig, model, ds, *, progress: bool):
    ev = config.evaluation
    rel, ent = config.restriction.relations, config.restriction.entities
    return evaluate_model(model, ds, split=ev.split, filter_validation_when_testing=ev.filter_validation_when_testing,
                          evaluation_relation_whitelist=None if rel is None else list(rel),
                          evaluation_entity_whitelist=None if ent is None else list(ent),
                          progress=progress, options=ev.options)


# ---------------------------------------------------------------------------- pipeline
def pipeline(config: PipelineConfig | None = None, *, dataset=None, progress: bool = True, data_dir=None,
             callback=None, num_replicates: int | None = None, trackers=None, **overrides):
    """Train and evaluate as ``config`` says, with ``overrides`` applied; returns a :class:`PipelineResult`.

    ``config``: a :class:`PipelineConfig` (or its dict form). ``overrides``: the keyword
    arguments of kgeval 0.1, each mapped onto the configuration
    (:meth:`PipelineConfig.from_kwargs`):

    - ``model``, ``model_kwargs``: a name from :func:`kgeval.models.model_names` and its options;
    - ``training_loop``, ``training_kwargs``, ``optimizer``, ``optimizer_kwargs`` (``lr``),
      ``epochs``: unset values take the per-model defaults of
      :data:`~kgeval.workflow.defaults.MODEL_DEFAULTS`;
    - ``stopper="early"``, ``stopper_kwargs``: early stopping on the validation split;
    - ``evaluation_relation_whitelist``, ``evaluation_entity_whitelist``: labels or ids;
      evaluation triples outside them are dropped and only whitelisted entities are candidates;
    - ``filter_validation_when_testing`` (default True), ``evaluation_split`` (``"test"`` or
      ``"valid"``: hyper-parameter search evaluates on validation, never reading test),
      ``evaluation_kwargs`` (options of :func:`kgeval.evaluate`);
    - ``random_seed`` (an integer in ``[0, 2**32)``), ``device``, ``drop_unseen``;
    - ``num_threads``: torch CPU threads during the run (restored afterwards). Default: 1 for
      small graphs (at most :data:`SMALL_GRAPH_ENTITIES` entities), where intra-op
      parallelism costs far more than it gains (Nations/ComplEx: 0.015 s per epoch on 1
      thread, 1-2.5 s on 2 threads of a busy 2-core machine), else torch's default.

    ``dataset``: a name, a directory or a :class:`~kgeval.data.Dataset` (default: the
    configuration's). ``callback(epoch, loss, model)`` runs after every epoch.

    ``trackers``: experiment trackers to log the run to (:mod:`kgeval.tracking`): names
    (``"mlflow"``, ``"wandb"``, ``"tensorboard"``, ``"csv"``), adapters, or a
    :class:`~kgeval.tracking.Trackers` group. Each is made (its package imported, its server asked)
    before the dataset is loaded. They receive the configuration, the loss of every epoch, each
    early-stopping validation value and the final values of ``results.json``. A run of a group made
    here ends with the pipeline; a run of your own group stays open, so that you can log the saved
    run directory (``trackers.log_artifact(run.save(path))``) before ``trackers.end_run()``.

    ``num_replicates=k`` is deprecated: it returns :func:`replicates`'s
    :class:`~kgeval.workflow.replicates.ReplicatesResult` instead of one :class:`PipelineResult`;
    call :func:`kgeval.replicates` instead.

    Examples
    --------
    >>> import kgeval
    >>> run = kgeval.pipeline(dataset="nations", model="distmult", epochs=2, random_seed=0, progress=False)
    >>> run.training.epochs_run
    2
    >>> 0 < run.results.get_metric("both.realistic.inverse_harmonic_mean_rank") <= 1
    True
    """
    config = _configured(config, dataset, overrides)
    group, owned = Trackers.of(trackers)  # before any loading: a missing package or server fails now
    if num_replicates is not None:
        warnings.warn("pipeline(num_replicates=k) is deprecated: call kgeval.replicates(config, k, ...), which "
                      "returns the ReplicatesResult; pipeline() returns one PipelineResult", DeprecationWarning,
                      stacklevel=2)
        return _replicates(config, num_replicates, dataset=dataset, progress=progress, data_dir=data_dir,
                           callback=callback, trackers=group)
    return _run(config, dataset, progress=progress, data_dir=data_dir, callback=callback, trackers=group,
                owned=owned)


def replicates(config: PipelineConfig | None = None, num_replicates: int | None = None, *, dataset=None,
               progress: bool = True, data_dir=None, callback=None, output=None, on_run=None, trackers=None,
               **overrides) -> ReplicatesResult:
    """Train and evaluate one configuration ``num_replicates`` times, with seeds ``seed, seed + 1, ...``.

    Parameters
    ----------
    config, dataset, progress, data_dir, callback, **overrides
        As :func:`pipeline`.
    num_replicates : int
        The number of runs, at least 2; the seeds must stay below ``2**32``.
    output : path, optional
        A directory (absent or empty) that receives each run in ``output/seed<s>`` as soon as it is
        trained and ``replicates.json`` after the last; a run that cannot be saved stops the set with
        :class:`~kgeval.workflow.replicates.ReplicateSaveError` (file and reason named), the runs saved
        before it kept.
    on_run : callable, optional
        ``on_run(seed, run)`` as each run finishes, before it is saved.
    trackers : optional
        As :func:`pipeline`: one tracker run per replicate, with its run directory when ``output`` is given.

    Returns
    -------
    ReplicatesResult
        The runs (a :class:`PipelineResult` each, run ``i`` exactly ``pipeline(random_seed=seed + i)``)
        and the summary across seeds (mean, sample sd and t interval of each headline metric).

    Examples
    --------
    >>> import kgeval
    >>> rep = kgeval.replicates(dataset="nations", model="distmult", epochs=1,  # doctest: +SKIP
    ...                         random_seed=0, num_replicates=3)
    >>> rep.seeds  # doctest: +SKIP
    [0, 1, 2]
    """
    config = _configured(config, dataset, overrides)
    group, _ = Trackers.of(trackers)
    return _replicates(config, num_replicates, dataset=dataset, progress=progress, data_dir=data_dir,
                       callback=callback, output=output, on_run=on_run, trackers=group)


def _replicates(config: PipelineConfig, num_replicates, *, dataset, output=None, on_run=None, trackers=None,
                **kwargs) -> ReplicatesResult:
    """The runs one after the other; each saved as it finishes when ``output`` is given, so a failed
    save (a full disk) loses no replicate saved before it. With ``trackers``, each run is one tracker run,
    ended after its directory is saved and logged."""
    from .runs import check_output

    seeds = replicate_seeds(config.seed, num_replicates)
    dataset = None if isinstance(dataset, str) else dataset  # a name is the configuration's dataset
    target = None if output is None else check_output(output)
    runs = []
    with _replicate_counter(len(seeds), kwargs.get("progress", False)) as counter:
        for s in seeds:
            runs.append(_run(config.replace(seed=s), dataset, trackers=trackers, **kwargs))
            if on_run is not None:
                on_run(s, runs[-1])
            if counter is not None:  # the bar's postfix: the best MRR so far and its seed
                counter.done(None, _replicate_value(runs[-1]), of=f"seed {s}")
            _save_replicate(runs, seeds, target, trackers)
    result = ReplicatesResult(runs, seeds)
    if target is not None:
        write_summary(result, target, target)
    return result


def _save_replicate(runs: list, seeds: list[int], target, trackers) -> None:
    """Save the last of ``runs`` in ``target/seed<s>`` (if there is a target) and end its tracker run."""
    from .runs import save_run

    if target is None:
        _end_tracker_run(trackers)
        return
    try:
        target.mkdir(parents=True, exist_ok=True)
        saved = save_run(runs[-1], target / f"seed{seeds[len(runs) - 1]}")
    except (OSError, KGEvalError) as exc:
        _end_tracker_run(trackers)
        raise ReplicateSaveError(lost_replicate(exc, target, seeds, len(runs)), runs, seeds[:len(runs)]) from exc
    _end_tracker_run(trackers, saved)


#: the value the replicate counter shows, and its best so far (both sides, realistic ranks)
REPLICATE_METRIC = "both.realistic.inverse_harmonic_mean_rank"


def _replicate_value(run) -> float | None:
    try:
        return run.results.get_metric(REPLICATE_METRIC)
    except KGEvalError:  # an evaluation of one side only: no best so far to show
        return None


def _replicate_counter(total: int, progress: bool):
    """A :class:`~.progress.Counter` of replicates with the best MRR so far, or a null context without progress."""
    return Counter(total, desc="replicates", unit="run", label="MRR") if progress else contextlib.nullcontext()


def _end_tracker_run(trackers, saved=None) -> None:
    """Log the saved run directory (if any) to the tracker run left open by :func:`_run` and end it."""
    if trackers is None or not trackers.active:
        return
    if saved is not None:
        trackers.log_artifact(saved, "run")
    trackers.end_run()


def _configured(config, dataset, overrides: dict) -> PipelineConfig:
    """The configuration of a :func:`pipeline` call, checked before any loading or training."""
    if config is not None and not isinstance(config, PipelineConfig):
        config = PipelineConfig.from_dict(config)
    if isinstance(dataset, str):
        overrides["dataset"] = dataset
    config = PipelineConfig.from_kwargs(config, **overrides) if overrides else (config or PipelineConfig())
    if dataset is None and config.dataset is None:
        raise InvalidInputError("pipeline() needs a dataset")
    if config.model is None:
        raise InvalidInputError("pipeline() needs a model")
    if config.device is not None:  # before loading or training: 'cuda' on a CPU-only build is a named error
        import torch

        from ..evaluation.inputs import usable_device

        usable_device(torch.device(config.device))
    return config


def _run(config: PipelineConfig, dataset, *, progress: bool, data_dir, callback, trackers=None,
         owned: bool = False) -> PipelineResult:
    from .runs import default_run_name

    t_start = time.perf_counter()
    ds, config = _handle_dataset(config, dataset, data_dir)
    config = config.resolve()
    stopper, config = _handle_stopper(config, ds)
    tags = {"dataset": ds.name, "model": config.model.name, "split": config.evaluation.split}
    with tracked_run(trackers, owned, default_run_name(ds.name, config.model.name, config.seed), config.to_dict(),
                     tags) as tracking, torch_threads(config.threads):
        if tracking is not None:
            callback = epoch_callback(tracking, stopper, callback)
        model = _handle_model(config, ds)
        t0 = time.perf_counter()
        training = _handle_training(config, model, ds, stopper, progress=progress, callback=callback)
        t1 = time.perf_counter()
        results = _handle_evaluation(config, model, ds, progress=progress)
        if tracking is not None:
            log_results(tracking, results, training)
    t2 = time.perf_counter()
    timings = {"training": t1 - t0, "evaluation": t2 - t1, "total": t2 - t_start}
    return PipelineResult(results=results, model=model, training=training, timings=timings, config=config,
                          dataset=ds)
