"""What :func:`~kgeval.workflow.hpo.hpo_pipeline` checks before the first trial.

The base configuration, the search space and the values trials combine from it, the metric (it must have a
value under the evaluation options in use, and a direction that selects the best trial), and the early
stopper's metric: everything that can be checked without training, so that a search is refused at once rather
than after hours of trials.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidInputError, KGEvalError, UnknownNameError
from .config import PipelineConfig
from .evaluation import evaluate_model, metric_direction
from .pipeline import check_stopping_schedule
from .search_space import probe_values
from .study_guard import _SPEED_ONLY_EVALUATION, _canonical_metric

#: pipeline keywords hpo_pipeline sets itself, and paths a search space must not move
_RESERVED = ("evaluation_split", "callback", "progress")
_FIXED_PATHS = ("dataset", "evaluation.split")
#: paths that change what a trial's value measures (which triples are ranked, against which candidates,
#: how ties and sides count): trials differing in them are not comparable, so a search space must not move them
_PROTOCOL_PATHS = ("drop_unseen", "restriction", "evaluation")


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


def validation_record(objective, model, config: PipelineConfig, value: float) -> dict:
    """A trial's validation record: the value that scores it (filtered with training + validation) and, when the
    search records it (``objective.with_test``), the same model's value filtered with test too (one more
    evaluation, the test triples known answers only)."""
    record = {"selected_by": f"validation {objective.metric} filtered with training + validation", "filtered": value}
    if objective.with_test:
        from ..evaluation import KnownTriples

        if objective.known_with_test is None:  # built once, reused by every trial
            objective.known_with_test = KnownTriples({"training": objective.ds.training,
                                                      "testing": objective.ds.testing})
        res = _validation_results(model, objective.ds, config.resolve(), objective.known_with_test)
        record["filtered_with_test"] = float(res.get_metric(objective.metric))
    return record


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
