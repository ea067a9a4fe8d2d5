"""Hyper-parameter search with Optuna: :func:`hpo_pipeline`.

Every trial runs :func:`kgeval.pipeline` on a :class:`~kgeval.workflow.PipelineConfig`: the base
configuration (any pipeline option) with the trial's values written at their dotted paths
(``model.dim``, ``training.batch_size``, ``optimizer.lr``, ``early_stopping.patience``, ...), and
with ``evaluation.split = "valid"``: the model is trained on the training split and scored on the
validation split, filtering with training + validation. The search space cannot move the
evaluation protocol (``evaluation.*`` other than speed options, ``restriction.*``,
``drop_unseen``): trials must be scored alike to be compared. The test split is never read, so
the search cannot leak test information into model selection; evaluate the best configuration on
test afterwards with ``kgeval.pipeline(result.best_config)``.

Search spaces are described in :mod:`kgeval.workflow.search_space`; studies (shared storage,
heartbeats of running trials, per-trial sampler seeds) in :mod:`kgeval.workflow.study`.
Everything that can be checked without training is checked before the first trial
(:mod:`kgeval.workflow.hpo_checks`): the configuration, the search space and the values trials combine
from it, and the metric (it must have a value under the evaluation options in use). A study's identity
(its saved results, its settings when resumed) is guarded in :mod:`kgeval.workflow.study_guard`.

Optuna is an optional dependency (``pip install -e ".[hpo]"``) imported only here, lazily.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._compat import install_hint
from .._json import finite_or_none, write_json
from .._validation import check_positive_int, check_positive_number
from ..errors import InvalidInputError, KGEvalError
from ..keys import DEFAULT_METRIC
from ..tracking import Trackers
from .config import PipelineConfig
from .hpo_checks import (StoppingMetricWarning, _base_config, _check_metric_has_value,  # noqa: F401 (re-exported)
                         _check_space_values, _direction, _given_paths, _refuse_constant_metric, _stop_on_the_metric,
                         _validation_results, refuse_fixed_and_searched, validation_record)
from .pipeline import pipeline
from .progress import TrialCounter, start_trials
from .search_space import default_search_space, grid_points, normalize_space, suggest
from .study_guard import (IDENTITY_ATTR, OUTPUT_FILES, STUDY_ID_ATTR, _canonical_metric,  # noqa: F401 (re-exported)
                          check_output_study, check_resumed_study, ensure_study_id, study_identity)

INSTALL_HINT = f"hyper-parameter search needs optuna: {install_hint('hpo', 'optuna')}"


class MissingDependencyError(KGEvalError, ImportError):
    """An optional dependency (optuna) is not installed."""


class TrialError(KGEvalError):
    """A trial raised an error; the study keeps every finished trial and can be resumed."""


class HPOInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the search; ``result`` holds the study so far (``None`` without a finished trial)."""

    def __init__(self, message: str, result: HPOResult | None):
        super().__init__(message)
        self.result = result


def _optuna():
    try:
        import optuna
    except ImportError:
        raise MissingDependencyError(INSTALL_HINT) from None
    return optuna


@dataclass
class HPOResult:
    """Outcome of :func:`hpo_pipeline`: the Optuna ``study`` and the best trial's settings."""

    study: Any
    metric: str
    direction: str
    storage: str
    study_name: str
    #: what the search found when it opened the study and should say (trials of workers that stopped)
    notes: tuple[str, ...] = ()

    @property
    def best_trial(self):
        """The best complete trial (ties: the lowest trial number), read from the storage in one query.

        Optuna's ``study.best_trial`` is one storage query per access and orders ties as the database
        returns them: reading value, parameters and configuration through separate accesses while another
        worker finishes a better trial mixed two trials (:meth:`summary` reads everything from one trial).
        """
        optuna = _optuna()
        complete = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if not complete:
            raise KGEvalError(f"no trial of study {self.study_name!r} has completed yet")
        sign = -1.0 if self.direction == "maximize" else 1.0
        return min(complete, key=lambda t: (sign * t.value, t.number))

    @property
    def best_params(self) -> dict[str, Any]:
        return dict(self.best_trial.params)

    @property
    def best_value(self) -> float:
        return float(self.best_trial.value)

    @property
    def best_config(self) -> PipelineConfig:
        """The best trial's configuration, set to evaluate on test: ``kgeval.pipeline(result.best_config)``."""
        return _test_config(self.best_trial)

    @property
    def best_configuration(self) -> dict[str, Any]:
        """The best trial's configuration as :func:`kgeval.pipeline` keywords (evaluated on validation)."""
        return dict(self.best_trial.user_attrs["configuration"])

    def best_pipeline_kwargs(self) -> dict[str, Any]:
        """Keyword arguments to re-run the best configuration with the final test evaluation."""
        return _test_kwargs(self.best_trial)

    def summary(self) -> dict[str, Any]:
        """The search and its best trial, every field read from that one trial (what :meth:`save` writes)."""
        best = self.best_trial
        return {"metric": self.metric, "direction": self.direction, "storage": self.shown_storage,
                "study_name": self.study_name, "study_id": self.study_id, "best_trial": best.number, "best_value": float(best.value),
                "best_params": dict(best.params), "pipeline": _test_kwargs(best),
                "config": _test_config(best).to_dict()}

    @property
    def study_id(self) -> str | None:
        """The random id kgeval gave the study when it first opened it (:data:`STUDY_ID_ATTR`); ``None`` for a
        study it never opened. Two studies of one name and storage (an in-memory one per run, one made anew in a
        deleted database) have different ids."""
        value = self.study.user_attrs.get(STUDY_ID_ATTR)
        return value if isinstance(value, str) else None

    @property
    def shown_storage(self) -> str:
        """The storage URL with its password masked: what kgeval prints and saves."""
        from .study import display_url

        return display_url(self.storage)

    def resume_hint(self) -> str:
        from .study import in_memory_sqlite

        if in_memory_sqlite(self.storage):  # the next run's sqlite:// is a new, empty database
            return (f"the study is in an in-memory database ({self.shown_storage}), gone when this process ends: it "
                    "cannot be resumed; give --storage sqlite:///FILE to keep a study")
        return f"resume: run again with --storage {self.shown_storage} --study-name {self.study_name}"

    def save(self, directory: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write ``best_pipeline_config.json`` and ``trials.json`` into ``directory`` (atomically; NaN as null).

        A directory holding another study's files (another study name or storage, another in-memory run, a study
        of the same name made anew) is refused with an :class:`~kgeval.workflow.runs.OutputDirectoryError`
        (:func:`check_output_study`): they are never replaced, unless ``overwrite=True``.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        check_output_study(directory, self.study_name, self.shown_storage, study=self.study, overwrite=overwrite)
        write_json(directory / "best_pipeline_config.json", finite_or_none(self.summary()))
        trials = [
            {"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
             "intermediate_values": {str(k): v for k, v in t.intermediate_values.items()},
             **{k: t.user_attrs[k] for k in ("validation", "early_stopping") if k in t.user_attrs}}
            for t in self.study.trials
        ]
        write_json(directory / "trials.json", finite_or_none(trials))
        return directory


def _test_config(trial) -> PipelineConfig:
    return PipelineConfig.from_dict(trial.user_attrs["config"]).with_paths({"evaluation.split": "test"})


def _test_kwargs(trial) -> dict[str, Any]:
    return {**trial.user_attrs["configuration"], "evaluation_split": "test"}


def hpo_pipeline(config: PipelineConfig | Mapping | None = None, *, dataset=None, n_trials: int = 10,
                 search_space: Mapping[str, Any] | None = None, sampler: str = "tpe", pruner: str = "median",
                 storage: str | None = None, study_name: str | None = None, load_if_exists: bool = True,
                 metric: str = DEFAULT_METRIC, direction: str | None = None, evaluation_frequency: int | None = None,
                 output_dir: str | os.PathLike | None = None, overwrite: bool = False, timeout: float | None = None, data_dir=None,
                 progress: bool = False, trackers=None, filtered_with_test: bool = False,
                 **pipeline_kwargs) -> HPOResult:
    """Search hyper-parameters on ``dataset``, optimising a validation metric.

    ``config`` (a :class:`PipelineConfig` or its dict) and ``pipeline_kwargs`` (any keyword of
    :func:`kgeval.pipeline`: ``model``, ``model_kwargs``, ``epochs``, ``training_kwargs``,
    ``evaluation_kwargs``, ``device``, ``drop_unseen``, ``num_threads``, ``random_seed``, ...)
    make the base configuration every trial starts from; ``random_seed`` is every trial's
    pipeline seed, so trials differ only in their parameters.

    - ``n_trials``: trials to run in this call (added to those of a resumed study);
    - ``search_space``: dotted configuration paths -> distributions
      (:mod:`kgeval.workflow.search_space`); default: dim, learning rate and one loop option, less
      those ``pipeline_kwargs`` fix; a path both fixed there and in a given space is refused;
    - ``sampler`` (``"tpe"``, ``"random"``, ``"grid"``), ``pruner`` (``"median"``, ``"none"``):
      trial ``n`` is sampled with the seed ``trial_seed(random_seed, n)``, so parallel workers
      and resumed studies draw new configurations (:mod:`kgeval.workflow.study`);
    - ``storage``, ``study_name``, ``load_if_exists``: an Optuna storage URL (default
      ``sqlite:///<output_dir or cwd>/kgeval-hpo.db``) and study name (``<dataset>-<model>``);
      an existing study is resumed, trials left RUNNING by a killed worker are marked FAILED;
    - ``metric``, ``direction``: the validation metric (any :meth:`Results.get_metric` key with a
      value under the evaluation options in use) and ``"maximize"``/``"minimize"`` (default: the
      metric's own; the other one is refused);
    - ``evaluation_frequency``: every so many epochs (default ``epochs // 5``) the validation
      metric is reported to Optuna for pruning;
    - early stopping (``stopper="early"``, or a space over ``early_stopping.*``): a trial is scored on
      the checkpoint its stopper restores, so the stopper stops on ``metric`` unless
      ``early_stopping.metric`` is set (then kept, with a :class:`StoppingMetricWarning` where it differs);
      each trial records the stopper's metric, best epoch and value in its ``early_stopping`` user attribute;
    - ``output_dir``: where ``best_pipeline_config.json`` and ``trials.json`` are written (and the default
      storage made). One directory holds one study's files: a directory holding another study's (another
      study name or storage, the study of another run with an in-memory storage such as ``sqlite://``, a
      study made anew in a deleted database) is refused before the first trial (:func:`check_output_study`),
      unless ``overwrite=True``; the same study, resumed, rewrites them.
    - ``filtered_with_test``: record each trial's validation value filtered with test too (one more evaluation;
      the test triples read as known answers only) in its ``validation`` attribute, beside the value that scores it;
    - ``trackers``: experiment trackers (as :func:`kgeval.pipeline`'s), made before the first trial; each
      trial is one tracker run ``<study>-trial<n>`` in the group ``<study>``, which adds the trial's value
      (``hpo/value``); a pruned trial's run ends as KILLED.

    A failing trial stops the search with a :class:`TrialError`, Ctrl-C with
    :class:`HPOInterrupted` (after saving what exists); the study can be resumed either way.
    """
    optuna = _optuna()
    from .study import make_pruner, silent_trials_note

    n_trials = check_positive_int("n_trials", n_trials)
    frequency = check_positive_int("evaluation_frequency", evaluation_frequency, allow_none=True)
    timeout = check_positive_number("timeout", timeout, allow_none=True)
    if storage is not None and not isinstance(storage, str):
        raise InvalidInputError(f"storage must be a database URL such as 'sqlite:///hpo.db', got {storage!r}")
    base, ds = _base_and_dataset(config, pipeline_kwargs, dataset, data_dir)
    space = _search_space(search_space, base, pipeline_kwargs)
    base = _stop_on_the_metric(base, space, metric)
    _check_space_values(space, base)
    sampler_obj = _sampler(sampler, base.seed, space)
    pruner_obj = make_pruner(pruner)
    _refuse_constant_metric(metric)  # before the validation pass of the next check
    _check_metric_has_value(metric, ds, base)
    direction = _direction(metric, direction)

    out = _Output.make(output_dir, storage, study_name or f"{ds.name}-{base.model.name}".lower(), overwrite)
    out.check()  # before any trial: another study's results there are never replaced
    tracking, _ = Trackers.of(trackers)  # before any trial: a missing package or server fails now
    if tracking is not None:
        tracking.group = out.study_name
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failing trial: one TrialError, not Optuna's traceback too
    study = _open_study(out, study_identity(metric, base, ds), direction=direction, sampler=sampler_obj,
                        pruner=pruner_obj, load_if_exists=load_if_exists)
    result = HPOResult(study=study, metric=metric, direction=direction, storage=out.storage,
                       study_name=out.study_name, notes=tuple(n for n in [silent_trials_note(study)] if n))
    counter = start_trials(result, ds, base, space, n_trials, sampler, pruner) if progress else None  # header, counter
    objective = _Objective(ds, base, space, metric, frequency, tracking, bool(filtered_with_test))
    _optimize(result, objective, n_trials=n_trials, timeout=timeout,
              output_dir=out.directory, overwrite=overwrite, counter=counter)
    if out.directory is not None:
        result.save(out.directory, overwrite=overwrite)
    return result


def _base_and_dataset(config, pipeline_kwargs: dict, dataset, data_dir):
    """The base configuration every trial starts from, and the dataset the search runs on."""
    from ..data import get_dataset

    base = _base_config(config, pipeline_kwargs)
    if dataset is None and base.dataset is None:
        raise InvalidInputError("the search needs a dataset (dataset= or --dataset)")
    ds = get_dataset(dataset if dataset is not None else base.dataset, data_dir=data_dir,
                     drop_unseen=base.drop_unseen)
    return base, ds


def _search_space(search_space, base: PipelineConfig, pipeline_kwargs: dict) -> dict[str, Any]:
    """The normalised search space: the given one, or the default less what ``pipeline_kwargs`` fix; a path
    both fixed there and searched is refused."""
    fixed = {p: "given as a keyword argument" for p in _given_paths(pipeline_kwargs)}
    if search_space is None:  # the default space leaves out what the caller fixed
        search_space = {k: v for k, v in default_search_space(base.resolve().training.loop).items() if k not in fixed}
    space = normalize_space(search_space)
    refuse_fixed_and_searched(space, fixed)
    return space


@dataclass(frozen=True)
class _Output:
    """Where a search keeps its study (``storage``, an absolute URL) and writes its files (``directory``)."""

    directory: Path | None
    storage: str
    study_name: str
    overwrite: bool

    @classmethod
    def make(cls, output_dir, storage: str | None, study_name: str, overwrite: bool) -> _Output:
        from .study import absolute_sqlite_url

        directory = _make_output_dir(output_dir) if output_dir is not None else None
        # a relative SQLite file is another database in another working directory: recorded absolute (the saved
        # files and the resume hint name the one database, and another directory's study is not taken for it)
        if storage is None:  # the default: kgeval-hpo.db in the output directory, else in the working directory
            storage = f"sqlite:///{((directory or Path.cwd()) / 'kgeval-hpo.db').absolute()}"
        else:
            storage = absolute_sqlite_url(storage)
        return cls(directory, storage, study_name, overwrite)

    def check(self, **kwargs) -> None:
        """:func:`check_output_study` on the output directory, if the search has one."""
        from .study import display_url

        if self.directory is not None:
            check_output_study(self.directory, self.study_name, display_url(self.storage), overwrite=self.overwrite,
                               **kwargs)


def _open_study(out: _Output, identity: dict[str, Any], **study_options):
    """Open (or create) the study: its creator records ``identity``, every other worker compares its own with
    it, and the output directory is checked against the opened study (one made anew under the same name)."""
    from .study import display_url, open_study

    def before_create() -> None:  # every refusal of a new study comes before it exists: none is left behind
        out.check(new_study=True)

    def on_create(study) -> None:  # the creator records the settings; other workers compare theirs with them
        ensure_study_id(study)
        study.set_user_attr(IDENTITY_ATTR, identity)  # last: what a worker that loaded the new study waits for

    study = open_study(out.storage, out.study_name, before_create=before_create, on_create=on_create,
                       **study_options)
    check_resumed_study(study, identity, display_url(out.storage))
    ensure_study_id(study)
    out.check(study=study)
    return study


def _sampler(name: str, seed: int, space):
    from .study import make_sampler

    return make_sampler(name, seed, {n: grid_points(n, s) for n, s in space.items()} if name == "grid" else None)


def _make_output_dir(output_dir) -> Path:
    """Create the search's output directory now (it may hold an earlier search: resuming), or a named error."""
    from .runs import OutputDirectoryError

    path = Path(output_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise OutputDirectoryError(f"output directory {path} exists and is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputDirectoryError(f"cannot create output directory {path}: {exc.strerror or exc}") from None
    return path


class _Objective:
    """One trial: the base configuration with the trial's values, trained and scored on validation."""

    def __init__(self, ds, base: PipelineConfig, space, metric: str, frequency: int | None, trackers=None,
                 with_test: bool = False):
        self.ds, self.base, self.space, self.metric, self.frequency = ds, base, space, metric, frequency
        self.trackers = trackers  # a Trackers group: one run per trial, ended here
        self.current: tuple[int, dict] | None = None  # (trial number, values) of the trial running now
        self.known = None  # the validation filter sets as one KnownTriples, shared by every trial's reports
        self.with_test, self.known_with_test = with_test, None  # record the value filtered with test too

    def __call__(self, trial) -> float:
        optuna = _optuna()
        self.current = (trial.number, {})
        values = {name: suggest(trial, name, spec) for name, spec in self.space.items()}
        self.current = (trial.number, values)
        config = self.base.with_paths(values)
        epochs = config.resolve().training.epochs
        frequency = self.frequency or max(1, epochs // 5)

        def report(epoch: int, loss: float, kge) -> None:
            # intermediate validation values let the pruner stop unpromising trials early
            if epoch % frequency or epoch == epochs:
                return
            was_training = kge.training
            if self.known is None:
                from ..evaluation import KnownTriples, warm_kernel

                from .evaluation import validation_filter_sets

                self.known = KnownTriples(validation_filter_sets(self.ds))
                warm_kernel()  # every report evaluates: load the counting kernel once
            try:
                res = _validation_results(kge, self.ds, config, self.known)
            finally:
                kge.train(was_training)
            trial.report(float(res.get_metric(self.metric)), epoch)
            if trial.should_prune():
                if self.trackers is not None:
                    self.trackers.end_run("KILLED")
                raise optuna.TrialPruned()

        if self.trackers is not None:
            self.trackers.name = f"{self.trackers.group}-trial{trial.number}"
        with self.trackers or contextlib.nullcontext():  # the trial's tracker run ends here, failed or not
            result = pipeline(config, dataset=self.ds, progress=False, callback=report, trackers=self.trackers)
            value = float(result.results.get_metric(self.metric))
            if self.trackers is not None:
                self.trackers.log_metrics({"hpo/value": value})
                self.trackers.set_tags({"hpo.trial": str(trial.number), "hpo.metric": self.metric})
        trial.set_user_attr("validation", validation_record(self, result.model, config, value))
        trial.set_user_attr("configuration", result.configuration)
        trial.set_user_attr("config", result.config.to_dict())
        trial.set_user_attr("epochs_run", result.training.epochs_run)
        stopping = result.config.early_stopping
        if stopping is not None:  # whose checkpoint was scored: the stopper's best, by the stopper's metric
            trial.set_user_attr("early_stopping", {
                "metric": _canonical_metric(stopping.options["metric"]), "best_epoch": result.training.best_epoch,
                "best_value": finite_or_none(result.training.best_metric),
                "stopped_early": result.training.stopped_early, "selected_by": result.training.selected_by,
                **({} if result.training.best_metric_with_test is None else
                   {"best_value_filtered_with_test": finite_or_none(result.training.best_metric_with_test)})})
        trial.set_user_attr("seconds", result.timings["total"])
        self.current = None
        return value


def _optimize(result: HPOResult, objective: _Objective, *, n_trials: int, timeout, output_dir,
              overwrite: bool = False, counter: TrialCounter | None = None) -> None:
    """Run the trials (each counted on ``counter``); turn a failing trial into one clear :class:`TrialError`
    and Ctrl-C into :class:`HPOInterrupted`, saving what exists first."""
    from .study import redact

    try:
        with counter or contextlib.nullcontext():
            result.study.optimize(objective, n_trials=n_trials, timeout=timeout, catch=(), gc_after_trial=False,
                                  callbacks=None if counter is None else [counter])
    except KeyboardInterrupt:
        done = sum(t.state.name == "COMPLETE" for t in result.study.trials)
        saved = ""
        if done and output_dir is not None:
            result.save(output_dir, overwrite=overwrite)
            saved = f"; best configuration saved in {output_dir}"
        raise HPOInterrupted(f"interrupted: {done} trial(s) of study {result.study_name!r} complete, kept in "
                             f"{result.shown_storage}{saved}; {result.resume_hint()}", result if done else None) from None
    except Exception as exc:
        number, values = objective.current or (None, {})
        what = "the search" if number is None else \
            f"trial {number} ({', '.join(f'{k}={v!r}' for k, v in values.items())})"
        text = str(exc).strip().splitlines()
        detail = redact((text[0] if text else "") if isinstance(exc, KGEvalError) else
                        f"{type(exc).__name__}: {text[0] if text else ''}", result.storage)
        raise TrialError(f"{what} failed: {detail}; finished trials are kept in {result.shown_storage}; "
                         f"{result.resume_hint()}") from exc
    if not any(t.state.name == "COMPLETE" for t in result.study.trials):
        raise InvalidInputError(f"no trial of study {result.study_name!r} completed (all pruned or failed)")
