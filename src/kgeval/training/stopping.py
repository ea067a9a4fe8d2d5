"""Early stopping on a validation metric computed by :func:`kgeval.evaluate`."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping

import torch

from .._validation import check_bool, check_positive_int
from ..errors import InvalidInputError, KGEvalError
from ..keys import DEFAULT_METRIC



#: evaluate every so many epochs unless told otherwise
DEFAULT_FREQUENCY = 10


class EarlyStopper:
    """Evaluate every ``frequency`` epochs; stop after ``patience`` evaluations without improvement.

    An evaluation improves on the best value ``b`` when ``v > b * (1 + relative_delta)``
    (``larger_is_better``) or ``v < b * (1 - relative_delta)`` otherwise (PyKEEN's rule).
    ``larger_is_better`` defaults to the metric's own direction (``True`` for MRR and hits@k,
    ``False`` for mean rank); a value contradicting a kgeval metric's direction is refused, since
    it would keep the *worst* checkpoint. For a key kgeval does not know (a custom ``evaluate_fn``'s
    own metric) it defaults to ``True``. The
    weights of the best evaluation are kept in memory and :meth:`restore_best` (called by
    :func:`~kgeval.training.train` at the end) loads them back. Pass validation triples as
    ``evaluation_triples`` and train+valid as ``filter_triples``: the stopper must never see
    test triples.

    ``options``: the :class:`~kgeval.evaluation.EvaluationOptions` of each evaluation (or a
    mapping of them); ``evaluate_kwargs``, the older spelling, is a dict of the same options
    applied on top. With the default ``evaluate_fn`` (:func:`kgeval.evaluate`) both are validated
    here, before any training; the progress bar is always off.

    **Filter-set sensitivity.** ``test_triples`` (the test split, known but never trained on) makes every
    evaluation also compute the metric *filtered with test*: the same validation tasks with the test
    triples filtered out of the candidates too (LibKGE selects models this way; on one FB15k-237 ComplEx run
    0.312 filtered vs 0.355 filtered with test). It costs one more evaluation pass per evaluation, so it is
    computed only when asked. ``filtered_with_test``: ``"record"`` (the default when ``test_triples`` is
    given) records it beside the filtered value, which selects the model; ``"select"`` selects the model by
    it, as LibKGE. :attr:`records` holds both values per evaluation, :attr:`selected_by` says which one
    selected the model.

    A custom ``evaluate_fn`` is called as ``evaluate_fn(model, evaluation_triples,
    filter_triples=..., progress=False, **evaluate_kwargs)`` (plus ``options=`` when given) and may
    return a Results object (``get_metric``), a mapping or a plain number.
    """

    def __init__(self, evaluation_triples, filter_triples, *, metric: str = DEFAULT_METRIC, frequency: int = DEFAULT_FREQUENCY,
                 patience: int = 2, relative_delta: float = 0.0, larger_is_better: bool | None = None,
                 options=None, evaluate_kwargs: Mapping | None = None, evaluate_fn: Callable | None = None,
                 test_triples=None, filtered_with_test: str | None = None):
        frequency = check_positive_int("frequency", frequency)
        self.test_triples, self.filtered_with_test = test_triples, _with_test_mode(filtered_with_test, test_triples)
        self._known_with_test = None
        patience = check_positive_int("patience", patience)
        if not (isinstance(relative_delta, (int, float)) and 0 <= relative_delta < 1):
            raise InvalidInputError(f"relative_delta must be in [0, 1), got {relative_delta!r}")
        self.evaluation_triples = evaluation_triples
        self.filter_triples = filter_triples
        self._known = None  # the filter sets as one KnownTriples, built at the first evaluation (kgeval's evaluate)
        self.metric = metric
        self.frequency = frequency
        self.patience = patience
        self.relative_delta = float(relative_delta)
        self.larger_is_better = _direction(metric, check_bool("larger_is_better", larger_is_better, allow_none=True))
        if evaluate_kwargs is not None and not isinstance(evaluate_kwargs, Mapping):
            raise InvalidInputError(f"evaluate_kwargs must be a mapping, got {type(evaluate_kwargs).__name__}")
        self.evaluate_kwargs = dict(evaluate_kwargs or {})
        self.evaluate_fn = evaluate_fn
        self.options = _evaluation_options(options, self.evaluate_kwargs if evaluate_fn is None else {})
        if evaluate_fn is None:
            self.evaluate_kwargs = {}  # now part of self.options
            _check_metric(metric, self.options)
        self.reset()

    def reset(self) -> None:
        #: ``(epoch, value)`` of every evaluation, in order (the value that selects the model)
        self.history: list[tuple[int, float]] = []
        #: ``{"epoch", "filtered", "filtered_with_test"}`` of every evaluation (the latter None unless recorded)
        self.records: list[dict] = []
        #: the value filtered with test at the selected epoch (None unless recorded)
        self.best_metric_with_test: float | None = None
        self.best_epoch: int | None = None
        self.best_metric: float | None = None
        self.stopped = False
        self._bad_evaluations = 0
        self._best_state: dict | None = None

    def should_evaluate(self, epoch: int) -> bool:
        """Whether to evaluate after (1-based) ``epoch``."""
        return epoch % self.frequency == 0

    def _is_improvement(self, value: float) -> bool:
        # NaN (an undefined metric) is never an improvement, and any number improves on a NaN best:
        # a first NaN would otherwise win every comparison's "not better" and be restored at the end
        if math.isnan(value):
            return False
        if self.best_metric is None or math.isnan(self.best_metric):
            return True
        if self.larger_is_better:
            return value > self.best_metric * (1.0 + self.relative_delta) if self.best_metric >= 0 \
                else value > self.best_metric * (1.0 - self.relative_delta)
        return value < self.best_metric * (1.0 - self.relative_delta) if self.best_metric >= 0 \
            else value < self.best_metric * (1.0 + self.relative_delta)

    @property
    def selected_by(self) -> str:
        """Which value selects the model, in words."""
        if self.filtered_with_test == "select":
            return f"validation {self.metric} filtered with the validation filter sets + the test triples (as LibKGE)"
        return f"validation {self.metric} filtered with the validation filter sets (training + validation)"

    def _compute(self, model, *, with_test: bool = False) -> float:
        fn, filters = self.evaluate_fn, self.filter_triples
        if with_test:
            filters = _plus_test(filters, self.test_triples)
        if fn is None:
            # lazy: the evaluator is a heavier import. Repeated evaluations of the same filter sets: their
            # filter indexes and distinct count are built once (KnownTriples) and the compiled counting
            # kernel is loaded once up front (ranks are the same either way)
            from ..evaluation import KnownTriples, evaluate as fn, warm_kernel

            attr = "_known_with_test" if with_test else "_known"
            if getattr(self, attr) is None:
                setattr(self, attr, KnownTriples(filters if filters is not None else ()))
                warm_kernel()
            filters = getattr(self, attr)
        extra = {} if self.options is None else {"options": self.options}
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                result = fn(model, self.evaluation_triples, filter_triples=filters, progress=False,
                            **extra, **self.evaluate_kwargs)
        finally:
            model.train(was_training)
        if hasattr(result, "get_metric"):
            value = result.get_metric(self.metric)
        elif isinstance(result, Mapping):
            if self.metric not in result:
                raise InvalidInputError(f"early stopping metric {self.metric!r} is not among the evaluation's "
                                        f"values {sorted(result)[:10]}")
            value = result[self.metric]
        else:
            value = result
        try:
            return float(value)
        except (TypeError, ValueError):
            raise InvalidInputError(f"early stopping metric {self.metric!r}: the evaluation gave {value!r}, "
                                    "not a number") from None

    def evaluate(self, model, epoch: int) -> bool:
        """Evaluate ``model`` after ``epoch``; return ``True`` when training should stop."""
        filtered = self._compute(model)
        with_test = None if self.filtered_with_test is None else self._compute(model, with_test=True)
        self.records.append({"epoch": epoch, "filtered": filtered, "filtered_with_test": with_test})
        value = with_test if self.filtered_with_test == "select" else filtered
        self.history.append((epoch, value))
        if self._is_improvement(value):
            self.best_metric, self.best_epoch, self.best_metric_with_test = value, epoch, with_test
            self._bad_evaluations = 0
            self._best_state = copy.deepcopy({k: v.detach().clone() for k, v in model.state_dict().items()})
        else:
            self._bad_evaluations += 1
        self.stopped = self._bad_evaluations >= self.patience
        return self.stopped

    def restore_best(self, model) -> bool:
        """Load the best weights seen into ``model``; ``False`` if there was no evaluation."""
        if self._best_state is None:
            return False
        model.load_state_dict(self._best_state)
        return True


#: the values of ``filtered_with_test``: record the value filtered with test, or select the model by it
WITH_TEST_MODES = ("record", "select")


def _with_test_mode(mode, test_triples) -> str | None:
    if mode is None:
        return None if test_triples is None else "record"
    if mode not in WITH_TEST_MODES:
        raise InvalidInputError(f"filtered_with_test must be 'record', 'select' or None, got {mode!r}")
    if test_triples is None:
        raise InvalidInputError(f"filtered_with_test={mode!r} needs the test triples (test_triples=)")
    return mode


def _plus_test(filters, test_triples):
    """The filter sets plus the test triples, in the form they were given (a dict gets a ``testing`` set)."""
    if isinstance(filters, Mapping):
        return {**filters, "testing": test_triples}
    if filters is None:
        return [test_triples]
    if isinstance(filters, (list, tuple)) and not (len(filters) and isinstance(filters[0], (int, float))):
        return [*filters, test_triples]
    return [filters, test_triples]


def metric_increasing(metric: str) -> bool | None:
    """Whether larger values of the metric key ``metric`` are better; ``None`` for a key kgeval does not know."""
    from .. import metrics
    from ..keys import parse_key

    try:
        name = parse_key(metric).metric
        if name.lower().startswith(("precision_at_", "recall_at_")):  # query metrics: larger is better
            return True
        return bool(metrics.get(name).increasing)
    except (KGEvalError, TypeError, ValueError):
        return None


def _direction(metric, larger_is_better: bool | None) -> bool:
    """``larger_is_better``, defaulting to the metric's direction; a contradiction of it is refused."""
    increasing = metric_increasing(metric) if isinstance(metric, str) else None
    if larger_is_better is None:
        return True if increasing is None else increasing
    if increasing is not None and larger_is_better != increasing:
        better = "larger" if increasing else "smaller"
        raise InvalidInputError(f"early stopping metric {metric!r}: {better} values are better, but "
                                f"larger_is_better={larger_is_better} would keep the worst checkpoint; "
                                "leave larger_is_better unset")
    return larger_is_better


def _evaluation_options(options, kwargs: Mapping):
    """``options`` (EvaluationOptions, mapping or None) with ``kwargs`` on top, validated; None when both are empty."""
    if options is None and not kwargs:
        return None
    from ..evaluation.options import EvaluationOptions, canonical_names

    if options is None:
        options = EvaluationOptions()
    elif isinstance(options, Mapping):
        options = EvaluationOptions(**canonical_names(options))
    elif not isinstance(options, EvaluationOptions):
        raise InvalidInputError(f"options must be EvaluationOptions, a mapping or None, got {type(options).__name__}")
    return options.replace(**canonical_names(kwargs)) if kwargs else options


def _check_metric(metric: str, options) -> None:
    """Refuse, before training, a metric key :func:`kgeval.evaluate` will not produce: an unknown
    metric name or a side that is not evaluated (query-metric keys are left to the evaluation)."""
    from .. import metrics
    from ..keys import parse_key

    side, _, name = parse_key(metric)
    if not name.lower().startswith(("precision_at_", "recall_at_", "random_precision_at_", "random_recall_at_")):
        metrics.get(name)
    sides = ("head", "tail") if options is None else options.sides
    if side != "both" and side not in sides:
        raise InvalidInputError(f"early stopping metric {metric!r}: side {side!r} is not evaluated (sides: {sides})")
