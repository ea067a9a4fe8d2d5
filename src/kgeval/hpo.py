"""Hyper-parameter search with Optuna: :func:`hpo_pipeline`.

Every trial runs :func:`kgeval.pipeline` with ``evaluation_split="valid"``: the model is
trained on the training split and scored on the validation split, filtering with
training + validation. The test split is never read, so the search cannot leak test
information into model selection; evaluate the best configuration on test afterwards
with ``kgeval.pipeline(**result.best_pipeline_kwargs())``.

Optuna is an optional dependency (``pip install kgeval[hpo]``) imported only here, lazily.

Search spaces map a parameter name to a distribution::

    {"model.dim": {"type": "int", "low": 32, "high": 128, "step": 32},
     "optimizer.lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
     "training.batch_size": [64, 128, 256]}          # a list = categorical choices

Names are ``model.<keyword>`` (model options), ``training.<keyword>`` (training options such
as ``batch_size``, ``num_negatives``, ``label_smoothing``, ``regularizer_weight``) or
``optimizer.lr``; the short forms ``dim``, ``lr``, ``batch_size``, ``num_negatives``,
``label_smoothing`` and ``regularizer_weight`` are accepted too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._validation import check_seed
from .errors import InvalidInputError, KGEvalError, unknown_name
from .training.stopping import DEFAULT_METRIC
from .workflow.defaults import model_defaults
from .workflow.evaluation import evaluate_model, metric_direction
from .workflow.pipeline import pipeline

INSTALL_HINT = "hyper-parameter search needs optuna: pip install 'kgeval[hpo]' (or pip install optuna)"

_ALIASES = {
    "dim": "model.dim",
    "lr": "optimizer.lr",
    "learning_rate": "optimizer.lr",
    "batch_size": "training.batch_size",
    "num_negatives": "training.num_negatives",
    "label_smoothing": "training.label_smoothing",
    "regularizer_weight": "training.regularizer_weight",
}
_SECTIONS = ("model", "training", "optimizer")


class MissingDependencyError(KGEvalError, ImportError):
    """An optional dependency (optuna) is not installed."""


def _optuna():
    try:
        import optuna
    except ImportError:
        raise MissingDependencyError(INSTALL_HINT) from None
    return optuna


def default_search_space(model: str) -> dict[str, Any]:
    """The default search space for ``model``: embedding dim, learning rate and one loop option.

    ``grid`` entries give the points used by ``sampler="grid"`` for continuous ranges.
    """
    loop = model_defaults(model)["training_loop"]
    space: dict[str, Any] = {
        "model.dim": {"type": "int", "low": 32, "high": 128, "step": 32},
        "optimizer.lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True, "grid": [1e-3, 1e-2, 1e-1]},
    }
    if loop == "lcwa":
        space["training.batch_size"] = {"type": "categorical", "choices": [64, 128, 256]}
    else:
        space["training.num_negatives"] = {"type": "categorical", "choices": [8, 16, 32, 64]}
    return space


def _normalize_space(space: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Validate a search space and bring every entry to ``{"type": ..., ...}`` form."""
    if not isinstance(space, Mapping) or not space:
        raise InvalidInputError("search_space must be a non-empty mapping of parameter name -> distribution")
    out: dict[str, dict[str, Any]] = {}
    for raw_name, spec in space.items():
        name = _ALIASES.get(raw_name, raw_name)
        section, _, key = name.partition(".")
        if section not in _SECTIONS or not key:
            raise InvalidInputError(
                f"search space parameter {raw_name!r}: use model.<option>, training.<option> or optimizer.lr "
                f"(or one of {sorted(_ALIASES)})"
            )
        if section == "optimizer" and key != "lr":
            raise InvalidInputError(f"search space parameter {raw_name!r}: the only optimizer option is lr")
        if isinstance(spec, (list, tuple)):
            spec = {"type": "categorical", "choices": list(spec)}
        if not isinstance(spec, Mapping) or spec.get("type") not in ("int", "float", "categorical"):
            raise InvalidInputError(
                f"search space parameter {raw_name!r}: expected a list of choices or a dict with type "
                f"'int', 'float' or 'categorical', got {spec!r}"
            )
        spec = dict(spec)
        if spec["type"] == "categorical":
            if not spec.get("choices"):
                raise InvalidInputError(f"search space parameter {raw_name!r}: categorical needs non-empty 'choices'")
        else:
            if "low" not in spec or "high" not in spec or not spec["low"] <= spec["high"]:
                raise InvalidInputError(f"search space parameter {raw_name!r}: needs 'low' <= 'high', got {spec!r}")
        out[name] = spec
    return out


def _grid_points(name: str, spec: Mapping[str, Any]) -> list:
    if spec["type"] == "categorical":
        return list(spec["choices"])
    if "grid" in spec:
        return list(spec["grid"])
    if spec["type"] == "int":
        return list(range(int(spec["low"]), int(spec["high"]) + 1, int(spec.get("step", 1))))
    if "step" in spec:
        import numpy as np

        return [float(x) for x in np.arange(spec["low"], spec["high"] + spec["step"] / 2, spec["step"])]
    raise InvalidInputError(
        f"sampler='grid' needs a finite search space: give 'choices', 'step' or 'grid' for {name!r}"
    )


def _suggest(trial, name: str, spec: Mapping[str, Any]):
    if spec["type"] == "categorical":
        return trial.suggest_categorical(name, list(spec["choices"]))
    if spec["type"] == "int":
        return trial.suggest_int(name, int(spec["low"]), int(spec["high"]), step=int(spec.get("step", 1)),
                                 log=bool(spec.get("log", False)))
    return trial.suggest_float(name, float(spec["low"]), float(spec["high"]), step=spec.get("step"),
                               log=bool(spec.get("log", False)))


@dataclass
class HPOResult:
    """Outcome of :func:`hpo_pipeline`: the Optuna ``study`` and the best trial's settings."""

    study: Any
    metric: str
    direction: str
    storage: str
    study_name: str

    @property
    def best_trial(self):
        return self.study.best_trial

    @property
    def best_params(self) -> dict[str, Any]:
        return dict(self.study.best_trial.params)

    @property
    def best_value(self) -> float:
        return float(self.study.best_trial.value)

    @property
    def best_configuration(self) -> dict[str, Any]:
        """The pipeline configuration of the best trial (as recorded, evaluated on validation)."""
        return dict(self.study.best_trial.user_attrs["configuration"])

    def best_pipeline_kwargs(self) -> dict[str, Any]:
        """Keyword arguments to re-run the best configuration with the final test evaluation."""
        cfg = self.best_configuration
        cfg["evaluation_split"] = "test"
        return cfg

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``best_pipeline_config.json`` and ``trials.json`` into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        summary = {
            "metric": self.metric, "direction": self.direction, "storage": self.storage,
            "study_name": self.study_name, "best_value": self.best_value, "best_params": self.best_params,
            "pipeline": self.best_pipeline_kwargs(),
        }
        (directory / "best_pipeline_config.json").write_text(json.dumps(summary, indent=2) + "\n")
        trials = [
            {"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
             "intermediate_values": {str(k): v for k, v in t.intermediate_values.items()}}
            for t in self.study.trials
        ]
        (directory / "trials.json").write_text(json.dumps(trials, indent=2) + "\n")
        return directory


def hpo_pipeline(
    *,
    dataset,
    model: str,
    n_trials: int = 10,
    search_space: Mapping[str, Any] | None = None,
    sampler: str = "tpe",
    pruner: str = "median",
    storage: str | None = None,
    study_name: str | None = None,
    load_if_exists: bool = True,
    metric: str = DEFAULT_METRIC,
    direction: str | None = None,
    epochs: int | None = None,
    evaluation_frequency: int | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    training_loop: str | None = None,
    training_kwargs: Mapping[str, Any] | None = None,
    optimizer: str = "adam",
    optimizer_kwargs: Mapping[str, Any] | None = None,
    stopper: str | None = None,
    stopper_kwargs: Mapping[str, Any] | None = None,
    evaluation_relation_whitelist=None,
    evaluation_entity_whitelist=None,
    output_dir: str | os.PathLike | None = None,
    random_seed: int = 42,
    timeout: float | None = None,
    data_dir=None,
    progress: bool = False,
) -> HPOResult:
    """Search hyper-parameters of ``model`` on ``dataset``, optimising a validation metric.

    Parameters
    ----------
    n_trials:
        trials to run in this call (added to those already in a resumed study).
    search_space:
        see the module docstring; default :func:`default_search_space`.
    sampler, pruner:
        ``"tpe"`` | ``"random"`` | ``"grid"``; ``"median"`` | ``"none"``. The sampler is seeded
        with ``random_seed``.
    storage, study_name, load_if_exists:
        an Optuna storage URL, default ``sqlite:///<output_dir or cwd>/kgeval-hpo.db``; the
        default study name is ``<dataset>-<model>``. An existing study of that name is
        resumed when ``load_if_exists`` (the default).
    metric, direction:
        the validation metric (any :meth:`Results.get_metric` key) and ``"maximize"`` /
        ``"minimize"`` (default: from the metric).
    epochs, evaluation_frequency:
        training epochs per trial; every ``evaluation_frequency`` epochs (default
        ``epochs // 5``) the validation metric is reported to Optuna for pruning.

    Every trial uses the same ``random_seed``, so trials differ only in their parameters.
    """
    optuna = _optuna()
    random_seed = check_seed("random_seed", random_seed)  # the pipeline's seed rule
    from .data import get_dataset
    from .models import model_names

    ds = get_dataset(dataset, data_dir=data_dir)
    model_key = str(model).lower()
    if model_key not in model_names():
        raise unknown_name("model", model, model_names())
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise InvalidInputError(f"n_trials must be a positive integer, got {n_trials!r}")
    space = _normalize_space(search_space if search_space is not None else default_search_space(model_key))
    direction = direction or metric_direction(metric)
    if direction not in ("maximize", "minimize"):
        raise InvalidInputError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    n_epochs = model_defaults(model_key)["epochs"] if epochs is None else epochs
    if isinstance(n_epochs, bool) or not isinstance(n_epochs, int) or n_epochs < 1:
        raise InvalidInputError(f"epochs must be a positive integer, got {n_epochs!r}")
    frequency = evaluation_frequency or max(1, n_epochs // 5)

    samplers = {"tpe", "random", "grid"}
    if sampler not in samplers:
        raise unknown_name("sampler", sampler, samplers)
    if sampler == "tpe":
        sampler_obj = optuna.samplers.TPESampler(seed=random_seed)
    elif sampler == "random":
        sampler_obj = optuna.samplers.RandomSampler(seed=random_seed)
    else:
        sampler_obj = optuna.samplers.GridSampler({n: _grid_points(n, s) for n, s in space.items()}, seed=random_seed)
    pruners = {"median", "none"}
    if pruner not in pruners:
        raise unknown_name("pruner", pruner, pruners)
    pruner_obj = optuna.pruners.MedianPruner(n_startup_trials=2) if pruner == "median" else optuna.pruners.NopPruner()

    if storage is None:
        base = Path(output_dir) if output_dir is not None else Path.cwd()
        base.mkdir(parents=True, exist_ok=True)
        storage = f"sqlite:///{(base / 'kgeval-hpo.db').absolute()}"
    study_name = study_name or f"{ds.name}-{model_key}".lower()
    optuna.logging.set_verbosity(optuna.logging.INFO if progress else optuna.logging.WARNING)
    try:
        study = optuna.create_study(storage=storage, study_name=study_name, direction=direction,
                                    sampler=sampler_obj, pruner=pruner_obj, load_if_exists=load_if_exists)
    except optuna.exceptions.DuplicatedStudyError:
        raise InvalidInputError(
            f"study {study_name!r} already exists in {storage}; pass load_if_exists=True to resume it or another study_name"
        ) from None
    except Exception as exc:  # bad storage URL, unreadable database, ...
        raise InvalidInputError(f"cannot open the Optuna study {study_name!r} in {storage!r}: {exc}") from None
    if study.direction.name.lower() != direction:
        raise InvalidInputError(
            f"study {study_name!r} in {storage} optimises in direction {study.direction.name.lower()}, "
            f"but metric {metric!r} asks to {direction}"
        )

    base_model = dict(model_kwargs or {})
    base_training = dict(training_kwargs or {})
    base_optimizer = dict(optimizer_kwargs or {})

    def objective(trial) -> float:
        sections: dict[str, dict[str, Any]] = {"model": dict(base_model), "training": dict(base_training),
                                               "optimizer": dict(base_optimizer)}
        for name, spec in space.items():
            section, _, key = name.partition(".")
            sections[section][key] = _suggest(trial, name, spec)

        def report(epoch: int, loss: float, kge) -> None:
            # intermediate validation values let the pruner stop unpromising trials early
            if epoch % frequency or epoch == n_epochs:
                return
            was_training = kge.training
            try:
                res = evaluate_model(kge, ds, split="valid", evaluation_relation_whitelist=evaluation_relation_whitelist,
                                     evaluation_entity_whitelist=evaluation_entity_whitelist, progress=False)
            finally:
                kge.train(was_training)
            trial.report(float(res.get_metric(metric)), epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()

        result = pipeline(
            dataset=ds, model=model_key, model_kwargs=sections["model"], training_loop=training_loop,
            training_kwargs=sections["training"], optimizer=optimizer, optimizer_kwargs=sections["optimizer"],
            epochs=n_epochs, stopper=stopper, stopper_kwargs=stopper_kwargs,
            evaluation_relation_whitelist=evaluation_relation_whitelist,
            evaluation_entity_whitelist=evaluation_entity_whitelist, evaluation_split="valid",
            random_seed=random_seed, progress=False, callback=report,
        )
        value = float(result.results.get_metric(metric))
        configuration = dict(result.configuration)
        trial.set_user_attr("configuration", configuration)
        trial.set_user_attr("epochs_run", result.training.epochs_run)
        trial.set_user_attr("seconds", result.timings["total"])
        return value

    # kgeval's own errors (a bad option in the space, ...) abort the search instead of failing every trial
    study.optimize(objective, n_trials=n_trials, timeout=timeout, catch=(), gc_after_trial=False)
    if not any(t.state.name == "COMPLETE" for t in study.trials):
        raise InvalidInputError(f"no trial of study {study_name!r} completed (all pruned or failed)")
    result = HPOResult(study=study, metric=metric, direction=direction, storage=storage, study_name=study_name)
    if output_dir is not None:
        result.save(output_dir)
    return result
