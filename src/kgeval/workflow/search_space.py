"""Search spaces of :func:`~kgeval.workflow.hpo.hpo_pipeline`, checked before the first trial.

A search space maps a dotted configuration path to a distribution::

    {"model.dim": {"type": "int", "low": 32, "high": 128, "step": 32},
     "optimizer.lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
     "training.batch_size": [64, 128, 256]}          # a list = categorical choices

Paths address the pipeline configuration (``model.<option>``, ``training.<option>``,
``optimizer.lr``, ...). The short forms ``dim``, ``lr``, ``batch_size``, ``num_negatives``,
``label_smoothing`` and ``regularizer_weight`` are accepted too.

Each entry is turned into its Optuna distribution here, so a malformed entry (``low > high``,
``log`` with ``low <= 0``, a fractional bound of an integer range, a list as a choice, a
repeated choice, a misspelt key) is refused with the parameter's name before any trial runs.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidInputError

ALIASES = {
    "dim": "model.dim",
    "lr": "optimizer.lr",
    "learning_rate": "optimizer.lr",
    "batch_size": "training.batch_size",
    "num_negatives": "training.num_negatives",
    "label_smoothing": "training.label_smoothing",
    "regularizer_weight": "training.regularizer_weight",
}
_KEYS = {"categorical": {"type", "choices"}, "int": {"type", "low", "high", "step", "log", "grid"},
         "float": {"type", "low", "high", "step", "log", "grid"}}


def default_search_space(training_loop: str) -> dict[str, Any]:
    """The default search space for a model trained with ``training_loop``: embedding dim,
    learning rate and one loop option. ``grid`` entries give the points used by ``sampler="grid"``."""
    space: dict[str, Any] = {
        "model.dim": {"type": "int", "low": 32, "high": 128, "step": 32},
        "optimizer.lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True, "grid": [1e-3, 1e-2, 1e-1]},
    }
    if training_loop == "lcwa":
        space["training.batch_size"] = {"type": "categorical", "choices": [64, 128, 256]}
    else:
        space["training.num_negatives"] = {"type": "categorical", "choices": [8, 16, 32, 64]}
    return space


def _number(where: str, key: str, value, *, whole: bool):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or (whole and float(value) != int(value)):
        raise InvalidInputError(f"{where}: {key!r} must be {'an integer' if whole else 'a number'}, got {value!r}")
    return int(value) if whole else float(value)


def _distribution(where: str, spec: Mapping[str, Any]):
    """The Optuna distribution of one normalised entry (Optuna's own checks as one-line errors)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    kind = spec["type"]
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, (list, tuple)) or not choices:
            raise InvalidInputError(f"{where}: categorical needs a non-empty list of 'choices'")
        bad = [c for c in choices if c is not None and not isinstance(c, (bool, int, float, str))]
        if bad:
            raise InvalidInputError(f"{where}: choices must be numbers, strings, booleans or null, got {bad[0]!r}")
        # Optuna stores a choice by its index, the first equal one: [4, 4, 8] drew 4 twice as often (the grid ran
        # it twice) and [1, True] recorded a trial that ran with True as 1
        repeated = [c for i, c in enumerate(choices) if any(c == d for d in choices[:i])]
        if repeated:
            raise InvalidInputError(f"{where}: choice {repeated[0]!r} is given twice (or equals another choice, "
                                    f"as 1, 1.0 and true do): {list(choices)!r}")
        return CategoricalDistribution(list(choices))
    whole = kind == "int"
    if "low" not in spec or "high" not in spec:
        raise InvalidInputError(f"{where}: an {kind} range needs 'low' and 'high', got {dict(spec)!r}")
    low, high = _number(where, "low", spec["low"], whole=whole), _number(where, "high", spec["high"], whole=whole)
    if "step" in spec and spec["step"] is None:  # written out as null: no step (suggest() reads spec["step"])
        spec.pop("step")
    step = None if spec.get("step") is None else _number(where, "step", spec["step"], whole=whole)
    if step is not None and not step > 0:
        raise InvalidInputError(f"{where}: 'step' must be positive, got {spec['step']!r}")
    if "grid" in spec:  # sampler="grid" visits exactly these points: they must lie in the declared range
        grid = spec["grid"]
        if not isinstance(grid, (list, tuple)) or not grid:
            raise InvalidInputError(f"{where}: 'grid' must be a non-empty list of points, got {grid!r}")
        outside = [g for g in grid if not low <= _number(where, "grid point", g, whole=whole) <= high]
        if outside:
            raise InvalidInputError(f"{where}: grid point(s) {outside} outside [{low}, {high}]")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise InvalidInputError(f"{where}: 'log' must be true or false, got {log!r}")
    try:
        if whole:
            return IntDistribution(low, high, log=log, step=1 if step is None else step)
        return FloatDistribution(low, high, log=log, step=step)
    except ValueError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None


def normalize_space(space: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Check a search space; every entry in ``{"type": ..., ...}`` form under its full path."""
    if not isinstance(space, Mapping) or not space:
        raise InvalidInputError("search_space must be a non-empty mapping of parameter name -> distribution")
    out: dict[str, dict[str, Any]] = {}
    for raw_name, spec in space.items():
        name = ALIASES.get(raw_name, raw_name)
        where = f"search space parameter {raw_name!r}"
        if not isinstance(name, str) or not name or name.startswith(".") or name.endswith("."):
            raise InvalidInputError(f"{where}: use a configuration path such as model.dim, training.batch_size "
                                    f"or optimizer.lr (or one of {sorted(ALIASES)})")
        if name in out:
            raise InvalidInputError(f"{where}: {name!r} is given twice")
        if isinstance(spec, (list, tuple)):
            spec = {"type": "categorical", "choices": list(spec)}
        if not isinstance(spec, Mapping) or spec.get("type") not in _KEYS:
            raise InvalidInputError(
                f"{where}: expected a list of choices or a dict with type 'int', 'float' or 'categorical', got {spec!r}"
            )
        unknown = sorted(set(spec) - _KEYS[spec["type"]])
        if unknown:
            raise InvalidInputError(f"{where}: unknown key(s) {unknown} for type {spec['type']!r}; "
                                    f"allowed: {sorted(_KEYS[spec['type']])}")
        spec = dict(spec)
        _distribution(where, spec)
        out[name] = spec
    return out


def probe_values(spec: Mapping[str, Any]) -> list:
    """Values that stand for the whole range when checking it: every choice, or both bounds."""
    if spec["type"] == "categorical":
        return list(spec["choices"])
    cast = int if spec["type"] == "int" else float
    return [cast(spec["low"]), cast(spec["high"])]


def grid_points(name: str, spec: Mapping[str, Any]) -> list:
    """The points ``sampler="grid"`` visits for one parameter."""
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


def suggest(trial, name: str, spec: Mapping[str, Any]):
    """The trial's value for parameter ``name``."""
    if spec["type"] == "categorical":
        return trial.suggest_categorical(name, list(spec["choices"]))
    if spec["type"] == "int":
        return trial.suggest_int(name, int(spec["low"]), int(spec["high"]), step=int(spec.get("step", 1)),
                                 log=bool(spec.get("log", False)))
    return trial.suggest_float(name, float(spec["low"]), float(spec["high"]), step=spec.get("step"),
                               log=bool(spec.get("log", False)))
