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
Everything that can be checked without training is checked before the first trial: the
configuration, the search space and the values trials combine from it, and the metric (it must have a
value under the evaluation options in use).

Optuna is an optional dependency (``pip install kgeval[hpo]``) imported only here, lazily.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._json import finite_or_none, write_json
from .._validation import check_positive_int, check_positive_number
from ..errors import InvalidInputError, KGEvalError, UnknownNameError
from ..keys import DEFAULT_METRIC
from .config import PipelineConfig
from .evaluation import evaluate_model, metric_direction
from .pipeline import check_stopping_schedule, pipeline
from .search_space import default_search_space, grid_points, normalize_space, probe_values, suggest

INSTALL_HINT = "hyper-parameter search needs optuna: pip install 'kgeval[hpo]' (or pip install optuna)"
#: pipeline keywords hpo_pipeline sets itself, and paths a search space must not move
_RESERVED = ("evaluation_split", "callback", "progress")
_FIXED_PATHS = ("dataset", "evaluation.split")
#: paths that change what a trial's value measures (which triples are ranked, against which candidates,
#: how ties and sides count): trials differing in them are not comparable, so a search space must not move them
_PROTOCOL_PATHS = ("drop_unseen", "restriction", "evaluation")


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
             **({"early_stopping": t.user_attrs["early_stopping"]} if "early_stopping" in t.user_attrs else {})}
            for t in self.study.trials
        ]
        write_json(directory / "trials.json", finite_or_none(trials))
        return directory


#: what :meth:`HPOResult.save` writes: the best trial (its study named inside) and every trial
OUTPUT_FILES = ("best_pipeline_config.json", "trials.json")


#: the study's user attribute holding a random id (32 hex digits) drawn when kgeval first opens the study; saved
#: as ``study_id`` in ``best_pipeline_config.json``, it tells apart studies of one name and storage URL
STUDY_ID_ATTR = "kgeval_study_id"


def ensure_study_id(study) -> str:
    """The study's :data:`STUDY_ID_ATTR`, drawn (OS randomness, never the search's seed) if it has none yet."""
    import uuid

    value = study.user_attrs.get(STUDY_ID_ATTR)
    if not isinstance(value, str):
        value = uuid.uuid4().hex
        study.set_user_attr(STUDY_ID_ATTR, value)
    return value


def check_output_study(directory: str | os.PathLike, study_name: str, shown_storage: str, *, study=None,
                       new_study: bool = False, overwrite: bool = False) -> None:
    """Refuse an output directory that holds the files of another search (``overwrite=True``: replace them).

    ``best_pipeline_config.json`` names its study, storage and study id; a directory whose file names another
    study (or the same name in another storage) was overwritten without a word by the next search
    given that directory (``-o DIR --study-name other``, or another ``--model`` with the default study
    name): that study's best configuration was lost. The same study (resumed, or another worker of it)
    writes its files again. A ``trials.json`` without ``best_pipeline_config.json``, or one that cannot be
    read, belongs to no known study and is refused too.

    One name and storage URL can also name different studies: an in-memory storage is a new database on every
    run (files of an in-memory study are refused before ``study`` is known, and then unless they carry its
    id), and a study made anew in a deleted or replaced database has another id (checked once ``study``, the
    opened study, is given). A file of an older kgeval, without a study id, must name a trial of ``study`` as
    its best (with its value). A relative SQLite URL in such a file is read against the current working
    directory: the directory of the search that wrote it was not recorded.

    ``new_study=True``: the storage holds no study of that name, and this search is about to create one. It
    would get a new id and hold no trial, so files naming this study and storage are refused now, before the
    study is made (refused after, they left an empty study in the storage).
    """
    from .._json import read_json
    from .runs import OutputDirectoryError
    from .study import display_url, in_memory_sqlite

    if overwrite:
        return
    directory = Path(directory)
    best, trials = (directory / name for name in OUTPUT_FILES)
    remedy = (f"give this search another output directory, move {best.name} and {trials.name} out of "
              f"{directory} first, or pass --overwrite (overwrite=True) to replace them")
    if not best.exists():
        if trials.exists():
            raise OutputDirectoryError(f"output directory {directory} holds a {trials.name} without "
                                       f"{best.name}, of an unknown search; it would be replaced: {remedy}")
        return
    try:
        saved = read_json(best, "a kgeval search's best configuration")
    except InvalidInputError as exc:
        raise OutputDirectoryError(f"output directory {directory}: {exc}; it would be replaced: {remedy}") from None
    if not isinstance(saved, dict):
        saved = {}
    name, storage = saved.get("study_name"), saved.get("storage")
    storage = display_url(storage)  # a file of an older kgeval may hold a ?password= it did not mask
    held = _describe_saved(name, storage)
    this = f"this search (study {study_name!r} in {shown_storage})"
    if name != study_name or not _same_storage(storage, shown_storage):
        raise OutputDirectoryError(f"output directory {directory} holds the results of {held}, not of {this}; "
                                   f"they would be replaced: {remedy}")
    saved_id = saved.get("study_id")
    current = None if study is None else study.user_attrs.get(STUDY_ID_ATTR)
    if in_memory_sqlite(shown_storage):
        if current is None or saved_id != current:
            raise OutputDirectoryError(
                f"output directory {directory} holds the results of {held}, an in-memory database: that study "
                f"ended with the search that wrote them, and {this} is a new one in a new in-memory database; they "
                f"would be replaced: {remedy}")
        return
    if new_study:
        raise OutputDirectoryError(
            f"output directory {directory} holds the results of another study of the same name: {held}"
            + (f" with study id {saved_id}" if isinstance(saved_id, str) else "")
            + f", but {shown_storage} holds no study of that name now (its database deleted or replaced, or the "
            f"study deleted), so this search would make a new one; it does not hold its best trial "
            f"{saved.get('best_trial')!r}, and the results would be replaced: {remedy}")
    if study is None:
        return
    if isinstance(saved_id, str) and isinstance(current, str):
        if saved_id != current:
            raise OutputDirectoryError(
                f"output directory {directory} holds the results of another study of the same name: {held} with "
                f"study id {saved_id}, while the study there now has id {current} (made anew since: its database "
                f"deleted or replaced); they would be replaced: {remedy}")
        return
    if not isinstance(saved_id, str) and not _holds_saved_best(study, saved):
        raise OutputDirectoryError(
            f"output directory {directory} holds the results of {held}, but the study of that name in "
            f"{shown_storage} does not hold its best trial {saved.get('best_trial')!r} (value "
            f"{saved.get('best_value')!r}): another study of the same name; they would be replaced: {remedy}")


def _describe_saved(name, storage) -> str:
    """How a message names the study of a saved ``best_pipeline_config.json`` (fields possibly missing)."""
    from .study import absolute_sqlite_url

    if not isinstance(name, str) and not isinstance(storage, str):
        return "an unknown search"
    if not isinstance(storage, str):
        return f"study {name!r} (its storage not recorded)"
    where = storage
    if absolute_sqlite_url(storage) != storage:
        where = (f"{storage} (a relative SQLite URL saved by an older kgeval: its file depends on the working "
                 f"directory of that search, which was not recorded; read against the current working directory: "
                 f"{absolute_sqlite_url(storage)})")
    return f"a study of unrecorded name in {where}" if not isinstance(name, str) else f"study {name!r} in {where}"


def _holds_saved_best(study, saved: dict) -> bool:
    """Whether ``study`` holds the saved best trial: a complete trial of that number and value."""
    number, value = saved.get("best_trial"), saved.get("best_value")
    if not isinstance(number, int) or isinstance(number, bool) or not isinstance(value, (int, float)):
        return False
    return any(t.number == number and t.state.name == "COMPLETE" and t.value == value
               for t in study.get_trials(deepcopy=False))


def _same_storage(saved, current: str) -> bool:
    """Whether two storage URLs name one database: equal, or SQLite URLs of one file (a relative
    ``sqlite:///h/kgeval-hpo.db`` and the absolute URL kgeval saves for it)."""
    if not isinstance(saved, str):
        return False
    if saved == current:
        return True
    prefix = "sqlite:///"
    if saved.startswith(prefix) and current.startswith(prefix):
        a, b = (Path(url[len(prefix):].split("?", 1)[0]) for url in (saved, current))
        return a.resolve() == b.resolve()
    return False


def _test_config(trial) -> PipelineConfig:
    return PipelineConfig.from_dict(trial.user_attrs["config"]).with_paths({"evaluation.split": "test"})


def _test_kwargs(trial) -> dict[str, Any]:
    return {**trial.user_attrs["configuration"], "evaluation_split": "test"}


def hpo_pipeline(config: PipelineConfig | Mapping | None = None, *, dataset=None, n_trials: int = 10,
                 search_space: Mapping[str, Any] | None = None, sampler: str = "tpe", pruner: str = "median",
                 storage: str | None = None, study_name: str | None = None, load_if_exists: bool = True,
                 metric: str = DEFAULT_METRIC, direction: str | None = None, evaluation_frequency: int | None = None,
                 output_dir: str | os.PathLike | None = None, overwrite: bool = False, timeout: float | None = None, data_dir=None,
                 progress: bool = False, **pipeline_kwargs) -> HPOResult:
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

    A failing trial stops the search with a :class:`TrialError`, Ctrl-C with
    :class:`HPOInterrupted` (after saving what exists); the study can be resumed either way.
    """
    optuna = _optuna()
    from ..data import get_dataset
    from .study import absolute_sqlite_url, display_url, make_pruner, open_study, silent_trials_note

    n_trials = check_positive_int("n_trials", n_trials)
    frequency = check_positive_int("evaluation_frequency", evaluation_frequency, allow_none=True)
    timeout = check_positive_number("timeout", timeout, allow_none=True)
    if storage is not None and not isinstance(storage, str):
        raise InvalidInputError(f"storage must be a database URL such as 'sqlite:///hpo.db', got {storage!r}")
    base = _base_config(config, pipeline_kwargs)
    if dataset is None and base.dataset is None:
        raise InvalidInputError("the search needs a dataset (dataset= or --dataset)")
    ds = get_dataset(dataset if dataset is not None else base.dataset, data_dir=data_dir,
                     drop_unseen=base.drop_unseen)
    fixed = {p: "given as a keyword argument" for p in _given_paths(pipeline_kwargs)}
    if search_space is None:  # the default space leaves out what the caller fixed
        search_space = {k: v for k, v in default_search_space(base.resolve().training.loop).items() if k not in fixed}
    space = normalize_space(search_space)
    refuse_fixed_and_searched(space, fixed)
    base = _stop_on_the_metric(base, space, metric)
    _check_space_values(space, base)
    sampler_obj = _sampler(sampler, base.seed, space)
    pruner_obj = make_pruner(pruner)
    _refuse_constant_metric(metric)  # before the validation pass of the next check
    _check_metric_has_value(metric, ds, base)
    direction = _direction(metric, direction)

    if output_dir is not None:
        output_dir = _make_output_dir(output_dir)
    # a relative SQLite file is another database in another working directory: recorded absolute (the saved
    # files and the resume hint name the one database, and another directory's study is not taken for it)
    storage = absolute_sqlite_url(storage) if storage is not None else _default_storage(output_dir)
    study_name = study_name or f"{ds.name}-{base.model.name}".lower()
    if output_dir is not None:  # before any trial: another study's results there are never replaced
        check_output_study(output_dir, study_name, display_url(storage), overwrite=overwrite)
    # a failing trial is reported once, by TrialError; Optuna would also log its traceback as a warning
    optuna.logging.set_verbosity(optuna.logging.INFO if progress else optuna.logging.ERROR)

    def before_create() -> None:  # every refusal of a new study comes before it exists: none is left behind
        if output_dir is not None:
            check_output_study(output_dir, study_name, display_url(storage), new_study=True, overwrite=overwrite)

    identity = study_identity(metric, base, ds)

    def on_create(study) -> None:  # the creator records the settings; other workers compare theirs with them
        ensure_study_id(study)
        study.set_user_attr(IDENTITY_ATTR, identity)  # last: what a worker that loaded the new study waits for

    study = open_study(storage, study_name, direction=direction, sampler=sampler_obj, pruner=pruner_obj,
                       load_if_exists=load_if_exists, before_create=before_create, on_create=on_create)
    check_resumed_study(study, identity, display_url(storage))
    ensure_study_id(study)
    if output_dir is not None:  # the opened study: one made anew under the same name is refused too
        check_output_study(output_dir, study_name, display_url(storage), study=study, overwrite=overwrite)
    result = HPOResult(study=study, metric=metric, direction=direction, storage=storage, study_name=study_name,
                       notes=tuple(n for n in [silent_trials_note(study)] if n))
    _optimize(result, _Objective(ds, base, space, metric, frequency), n_trials=n_trials, timeout=timeout,
              output_dir=output_dir, overwrite=overwrite)
    if output_dir is not None:
        result.save(output_dir, overwrite=overwrite)
    return result


#: the study's user attribute holding :func:`study_identity`
IDENTITY_ATTR = "kgeval_identity"
#: settings a resumed study may change: how fast a trial runs, and the seed (trials under other
#: seeds measure the same configuration, with other training noise; the seed also seeds the sampler)
_SPEED_ONLY = ("threads", "device", "seed")
_SPEED_ONLY_EVALUATION = ("device", "memory_budget", "batch_size", "entity_chunk_size", "distributed")


def _canonical_metric(metric: str) -> str:
    """``side.rank_type.key`` with the metric's canonical key (``mrr`` -> ``both.realistic.inverse_harmonic_mean_rank``)."""
    from .. import metrics
    from ..keys import parse_key

    try:
        key = parse_key(metric)
        return f"{key.side}.{key.rank_type}.{metrics.get(key.metric).key}"
    except KGEvalError:
        return str(metric)


def study_identity(metric: str, base: PipelineConfig, ds) -> dict[str, Any]:
    """What every trial of one study must share for their values to be comparable: the metric, the
    base configuration (less the settings of :data:`_SPEED_ONLY`) and the dataset's split hashes."""
    import json

    config = base.to_dict()
    for key in _SPEED_ONLY:
        config.pop(key, None)
    options = config["evaluation"]["options"]
    for key in _SPEED_ONLY_EVALUATION:
        options.pop(key, None)
    # through JSON: what the storage keeps (tuples as lists), so a resumed study compares like with like
    return json.loads(json.dumps({"metric": _canonical_metric(metric), "configuration": config,
                                  "dataset": ds.hashes()}, default=str))


def _differences(saved, current, path: str = "") -> list[str]:
    if isinstance(saved, dict) and isinstance(current, dict):
        out = []
        for key in sorted(set(saved) | set(current), key=str):
            out += _differences(saved.get(key), current.get(key), f"{path}.{key}" if path else str(key))
        return out
    return [] if saved == current else [f"{path}: {saved!r} -> {current!r}"]


#: seconds a worker waits for the settings of a new, empty study that another worker has just made
IDENTITY_WAIT = 10.0


def _wait_for_identity(study):
    """The study's recorded settings once they appear, or ``None`` after :data:`IDENTITY_WAIT` seconds (a study
    made by Optuna directly, or by a worker that died before recording them) or once a trial starts."""
    import time

    deadline = time.monotonic() + IDENTITY_WAIT
    while time.monotonic() < deadline:
        time.sleep(0.05)
        saved = study.user_attrs.get(IDENTITY_ATTR)
        if saved is not None or study.get_trials(deepcopy=False):
            return saved
    return None


def check_resumed_study(study, identity: dict[str, Any], shown_storage: str) -> None:
    """Record ``identity`` in a new study; refuse to resume one recorded with another identity.

    Trial values are only comparable under one metric, base configuration and dataset: resuming
    a study of validation MRR with ``metric="hits@10"`` (or with other epochs) would rank the
    new trials' hits@10 against the old trials' MRR and report the larger number as the best.
    A study made before kgeval recorded this (or by Optuna directly) is adopted as it is.

    A study without recorded settings and without any trial may have just been made by another worker, which
    records its settings right after: it is waited for up to :data:`IDENTITY_WAIT` seconds. (Adopted at once,
    two workers started together with other metrics each recorded theirs in turn, and both ran: MRR and
    hits@10 values ranked in one study.)
    """
    saved = study.user_attrs.get(IDENTITY_ATTR)
    if saved is None and not study.get_trials(deepcopy=False):
        saved = _wait_for_identity(study)
    if saved is None:
        study.set_user_attr(IDENTITY_ATTR, identity)
        return
    differ = _differences(saved, identity)
    if differ:
        shown = "; ".join(differ[:5]) + (f"; and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise InvalidInputError(
            f"study {study.study_name!r} in {shown_storage} was run with other settings, so its trials' values "
            f"are not comparable with new ones ({shown}); resume it with the same metric, base configuration "
            "and dataset, or give the search another study name"
        )


def _base_config(config, pipeline_kwargs: dict) -> PipelineConfig:
    """The configuration every trial starts from, evaluating on validation."""
    for key in _RESERVED:
        if key in pipeline_kwargs:
            raise InvalidInputError(f"hpo_pipeline sets {key!r} itself (trials evaluate on validation)")
    if config is not None and not isinstance(config, PipelineConfig):
        config = PipelineConfig.from_dict(config)
    base = PipelineConfig.from_kwargs(config, **pipeline_kwargs) if pipeline_kwargs else (config or PipelineConfig())
    if base.model is None:
        raise InvalidInputError("the search needs a model (model= or --model)")
    return base.with_paths({"evaluation.split": "valid"})


def _given_paths(pipeline_kwargs: Mapping[str, Any]) -> list[str]:
    """The configuration paths ``pipeline_kwargs`` set to a value (``None`` leaves a setting to its default)."""
    from .kwargs import kwargs_to_paths

    return [path for path, value in kwargs_to_paths(pipeline_kwargs).items() if value is not None]


def refuse_fixed_and_searched(space: Mapping[str, Any], fixed: Mapping[str, str]) -> None:
    """Refuse a parameter both fixed explicitly (``fixed``: its path -> how it was fixed) and searched: every
    trial would silently replace the fixed value with its own (``model_kwargs={"dim": 16}`` with a space
    over ``dim`` trained dims 4 and 8, never 16)."""
    both = [path for path in fixed if path in space]
    if both:
        raise InvalidInputError(f"{both[0]!r} is both {fixed[both[0]]} and in the search space, whose values "
                                "would replace it in every trial: remove it from one of them")


class StoppingMetricWarning(UserWarning):
    """Trials stop early on another metric than the one the search optimises (set so explicitly)."""


def _stop_on_the_metric(base: PipelineConfig, space: Mapping[str, Any], metric: str) -> PipelineConfig:
    """``base`` with early stopping on the search's ``metric`` where trials stop early and the stopper's metric
    was left unset; a stopper metric set explicitly (base or space) is kept, with a :class:`StoppingMetricWarning`
    where it differs.

    A trial that stops early is scored on the checkpoint its stopper restores: the best by the stopper's metric.
    Left to the stopper's default (MRR), a search optimising hits@1 scored each trial by the hits@1 of its
    best-MRR checkpoint, not by its best hits@1, and said nothing. The search's metric is what the user asked to
    optimise, so it also selects each trial's checkpoint (and the best configuration re-run on test stops on it).
    Each trial records the stopper's metric, best epoch and value in its ``early_stopping`` user attribute.
    """
    import warnings

    from ..training.stopping import DEFAULT_METRIC as STOPPING_DEFAULT

    searched = {name for name in space if name.split(".")[0] == "early_stopping"}
    if base.early_stopping is None and not searched:
        return base  # no trial stops early
    given = dict(base.early_stopping.options) if base.early_stopping is not None else {}
    if "early_stopping.metric" in searched or given.get("metric") is not None:
        chosen = given.get("metric")
        if "early_stopping.metric" in searched or _canonical_metric(chosen) != _canonical_metric(metric):
            what = "the search space's early_stopping.metric" if chosen is None or "early_stopping.metric" in \
                searched else f"early_stopping.metric {chosen!r}"
            warnings.warn(f"trials stop early on {what}, not on the optimised metric {metric!r}: each trial's value "
                          f"is the {metric!r} of the checkpoint that is best by the stopping metric (recorded in the "
                          "trial's 'early_stopping' user attribute); leave early_stopping.metric unset to stop on "
                          f"{metric!r}", StoppingMetricWarning, stacklevel=3)
        return base
    if _canonical_metric(metric) == _canonical_metric(STOPPING_DEFAULT):
        return base  # the stopper's default is the search's metric already
    larger = given.get("larger_is_better")
    try:
        own = _direction(metric, None) == "maximize"
    except KGEvalError:
        return base  # refused by the metric's own check, with its message
    if larger is not None and larger != own:
        # a direction given without a metric is the default metric's: it stays on it, and the user is told
        warnings.warn(f"trials stop early on the stopper's default metric {STOPPING_DEFAULT!r} "
                      f"(early_stopping.larger_is_better={larger} is its direction, not that of the optimised metric "
                      f"{metric!r}): each trial's value is the {metric!r} of the checkpoint that is best by that "
                      "metric (recorded in the trial's 'early_stopping' user attribute); leave larger_is_better "
                      f"unset to stop on {metric!r}", StoppingMetricWarning, stacklevel=3)
        return base
    return base.with_paths({"early_stopping.metric": metric})


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


def _default_storage(output_dir) -> str:
    base = Path(output_dir) if output_dir is not None else Path.cwd()  # output_dir: made by _make_output_dir
    return f"sqlite:///{(base / 'kgeval-hpo.db').absolute()}"


def _check_space_values(space: Mapping[str, Mapping[str, Any]], base: PipelineConfig) -> None:
    """Refuse, before any trial, paths the configuration does not have and values it, the model or
    the training loop refuse (checked for every choice and at both ends of each range)."""
    try:
        _check_config(base, {}, "the base configuration")
    except InvalidInputError:
        # no trial runs the base as it is: refused only where the space does not mend it
        # (stopper='early' for 2 epochs with a space over early_stopping.frequency [1, 2])
        first = {name: probe_values(spec)[0] for name, spec in space.items()}
        try:
            _check_config(base, first, "")
        except InvalidInputError:
            _check_config(base, {}, "the base configuration")
    for name, spec in space.items():
        if name in _FIXED_PATHS or name.split(".")[0] in _FIXED_PATHS:
            raise InvalidInputError(f"search space parameter {name!r}: the search fixes it (trials run on the "
                                    "given dataset and are evaluated on validation)")
        if name.split(".")[0] in _PROTOCOL_PATHS and not _speed_only_path(name):
            raise InvalidInputError(
                f"search space parameter {name!r} changes how trials are evaluated, so their values would not be "
                "comparable (the search would select the most lenient protocol, not the best model); set it in the "
                "base configuration instead (only the evaluation options "
                f"{', '.join(_SPEED_ONLY_EVALUATION)} may be searched)")
    _check_combinations(space, base)


#: above this many combinations of probe values, each parameter's values are checked on their own
MAX_PROBE_COMBINATIONS = 4096


def _check_combinations(space: Mapping[str, Mapping[str, Any]], base: PipelineConfig) -> None:
    """Check what trials will build: every combination of the parameters' probe values (a trial sets
    them all at once: early_stopping.frequency [1] makes early_stopping.patience valid for 2 epochs,
    training.loop 'slcwa' refuses a label_smoothing that 'lcwa' takes). A failing combination is
    named by the one value that fails on its own, if there is one."""
    import itertools
    import math

    probes = {name: probe_values(spec) for name, spec in space.items()}
    if math.prod(len(v) for v in probes.values()) > MAX_PROBE_COMBINATIONS:
        combinations = [{name: value} for name, values in probes.items() for value in values]
    else:
        combinations = [dict(zip(probes, values)) for values in itertools.product(*probes.values())]
    for values in combinations:
        try:
            _check_config(base, values, "")
        except InvalidInputError:
            for name, value in values.items():
                _check_config(base, {name: value}, f"search space parameter {name!r} can take {value!r}")
            shown = ", ".join(f"{name}={value!r}" for name, value in values.items())
            _check_config(base, values, f"search space values {shown} (taken together by a trial)")


def _speed_only_path(name: str) -> bool:
    """``evaluation.options.<option>`` for an option that changes how fast, not what, a trial evaluates."""
    parts = name.split(".")
    return len(parts) == 3 and parts[:2] == ["evaluation", "options"] and parts[2] in _SPEED_ONLY_EVALUATION


def _check_config(base: PipelineConfig, values: Mapping[str, Any], what: str) -> None:
    """Build what a trial with ``values`` would build, short of data: the resolved configuration,
    its TrainingConfig and a 2-entity model (which checks the model's option names and values)."""
    from ..models import get_model

    try:
        cfg = base.with_paths(values).resolve()
        cfg.training_config()
        if cfg.early_stopping is not None:
            check_stopping_schedule(cfg.early_stopping.options.get("frequency"), cfg.training.epochs)
        get_model(cfg.model.name, 2, 1, **cfg.model.options)
    except KGEvalError as exc:
        raise InvalidInputError(f"{what}: {exc}") from None


def _validation_results(model, ds, config: PipelineConfig, known=None):
    """``model`` evaluated on the validation split as every trial is (restriction and evaluation options;
    ``known``: the validation filter sets as a :class:`~kgeval.evaluation.KnownTriples`, built once)."""
    rel, ent = config.restriction.relations, config.restriction.entities
    return evaluate_model(model, ds, split="valid", evaluation_relation_whitelist=None if rel is None else list(rel),
                          evaluation_entity_whitelist=None if ent is None else list(ent), progress=False,
                          options=config.evaluation.options, known=known)


def _refuse_constant_metric(metric: str) -> None:
    """``count`` is the number of evaluated tasks, the same for every trial: nothing to optimise."""
    from ..keys import parse_key

    try:
        is_count = parse_key(metric).metric == "count"
    except KGEvalError:
        return  # an unknown key gets its own error from the metric check
    if is_count:
        raise InvalidInputError(f"metric {metric!r} is the number of evaluated tasks, the same for every trial: "
                                "optimise a quality metric (mrr, hits@10, mr, ...)")


def _direction(metric: str, direction: str | None) -> str:
    """``direction``, or the metric's own; query metrics (``tail.precision_at_10``) are maximised.
    A direction against the metric's (``mrr`` minimised) would select the worst trial: refused."""
    if direction is not None and direction not in ("maximize", "minimize"):
        raise InvalidInputError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    try:
        own = metric_direction(metric)
    except KGEvalError:
        name = metric.rsplit(".", 1)[-1].lower()
        if not name.startswith(("precision_at_", "recall_at_")):
            raise
        own = "maximize"
    if direction is not None and direction != own:
        raise InvalidInputError(f"direction={direction!r} for metric {metric!r}, which is better when "
                                f"{'larger' if own == 'maximize' else 'smaller'}: the search would select the "
                                "worst trial; leave direction unset")
    return own


def _check_metric_has_value(metric: str, ds, config: PipelineConfig) -> None:
    """Evaluate a constant scorer on validation and read ``metric``: a key that parses but has no
    value under these options (a side not evaluated, a query metric not computed) is refused now."""
    import torch

    from ..evaluation import FunctionScorer

    class ConstantScorer(FunctionScorer):
        def eval(self):  # evaluate_model switches models to eval mode
            return self

    def zeros(h, r, t):
        return torch.zeros(torch.broadcast_shapes(h.shape, r.shape, t.shape))

    scorer = ConstantScorer(zeros, ds.num_entities, ds.num_relations)
    try:
        _validation_results(scorer, ds, config).get_metric(metric)
    except UnknownNameError as exc:
        raise UnknownNameError(f"metric {metric!r} cannot be optimised: {exc}") from None
    except KGEvalError as exc:
        raise InvalidInputError(f"metric {metric!r} cannot be optimised: {exc}") from None


class _Objective:
    """One trial: the base configuration with the trial's values, trained and scored on validation."""

    def __init__(self, ds, base: PipelineConfig, space, metric: str, frequency: int | None):
        self.ds, self.base, self.space, self.metric, self.frequency = ds, base, space, metric, frequency
        self.current: tuple[int, dict] | None = None  # (trial number, values) of the trial running now
        self.known = None  # the validation filter sets as one KnownTriples, shared by every trial's reports

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
                raise optuna.TrialPruned()

        result = pipeline(config, dataset=self.ds, progress=False, callback=report)
        value = float(result.results.get_metric(self.metric))
        trial.set_user_attr("configuration", result.configuration)
        trial.set_user_attr("config", result.config.to_dict())
        trial.set_user_attr("epochs_run", result.training.epochs_run)
        stopping = result.config.early_stopping
        if stopping is not None:  # whose checkpoint was scored: the stopper's best, by the stopper's metric
            trial.set_user_attr("early_stopping", {
                "metric": _canonical_metric(stopping.options["metric"]), "best_epoch": result.training.best_epoch,
                "best_value": finite_or_none(result.training.best_metric),
                "stopped_early": result.training.stopped_early})
        trial.set_user_attr("seconds", result.timings["total"])
        self.current = None
        return value


def _optimize(result: HPOResult, objective: _Objective, *, n_trials: int, timeout, output_dir,
              overwrite: bool = False) -> None:
    """Run the trials; turn a failing trial into one clear :class:`TrialError` and Ctrl-C into
    :class:`HPOInterrupted`, saving what exists first."""
    from .study import redact

    try:
        result.study.optimize(objective, n_trials=n_trials, timeout=timeout, catch=(), gc_after_trial=False)
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
