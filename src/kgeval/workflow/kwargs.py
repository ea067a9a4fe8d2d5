"""The keyword arguments of ``kgeval.pipeline`` (kgeval 0.1's interface) as :class:`PipelineConfig` paths,
and the key checks every form of a configuration shares (:func:`check_keys`). Imports nothing from
:mod:`.config`, which builds on it.

``pipeline(model="distmult", model_kwargs={"dim": 16}, random_seed=3)`` keeps working: each
keyword names one configuration path (``model.name``, ``model.dim``, ``seed``), see
:data:`_KWARG_PATHS`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from .._validation import check_seed
from ..errors import InvalidInputError, unknown_name

#: Settings of :class:`kgeval.training.TrainingConfig` that live elsewhere in the tree: the
#: optimizer has its own section and the seed is the configuration's.
_TRAINING_ELSEWHERE = ("loop", "epochs", "optimizer", "lr", "seed")


def training_options() -> tuple[str, ...]:
    """The options a ``training`` section may set besides ``loop`` and ``epochs``."""
    from ..training import TrainingConfig

    return tuple(n for n in TrainingConfig.option_names() if n not in _TRAINING_ELSEWHERE)


#: The options of :class:`kgeval.training.EarlyStopper` a configuration may set.
EARLY_STOPPING_OPTIONS = ("metric", "frequency", "patience", "relative_delta", "larger_is_better",
                          "evaluate_kwargs", "filtered_with_test")


class UnknownConfigKeyError(InvalidInputError):
    """A configuration (dict, dotted path or keyword argument) names a setting that does not exist."""


def check_keys(what: str, given, allowed) -> None:
    """Refuse keys of ``given`` outside ``allowed``, suggesting the closest allowed key."""
    unknown = [k for k in given if k not in allowed]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), [str(a) for a in allowed], n=3, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise UnknownConfigKeyError(f"{what}: unknown option(s) {unknown}.{hint} Allowed: {sorted(allowed)}")


# keyword argument of kgeval.pipeline -> configuration path (None: a section given as a mapping)
_KWARG_PATHS = {
    "dataset": "dataset", "drop_unseen": "drop_unseen", "model": "model.name", "model_kwargs": ("model", None),
    "training_loop": "training.loop", "training_kwargs": ("training", None), "optimizer": "optimizer.name",
    "optimizer_kwargs": ("optimizer", None), "epochs": "training.epochs",
    "stopper": "early_stopping", "stopper_kwargs": ("early_stopping", None),
    "evaluation_relation_whitelist": "restriction.relations", "evaluation_entity_whitelist": "restriction.entities",
    "filter_validation_when_testing": "evaluation.filter_validation_when_testing",
    "evaluation_split": "evaluation.split", "evaluation_kwargs": "evaluation.options",
    "random_seed": "seed", "device": "device", "num_threads": "threads",
}
#: keywords of kgeval.training.train that the pipeline sets from other settings
_RESERVED_TRAINING_KEYS = {"loop", "optimizer", "lr", "epochs", "stopper", "seed", "progress", "num_entities",
                           "callback"}


def kwargs_to_paths(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`kgeval.pipeline` keyword arguments as dotted configuration paths."""
    check_keys("pipeline()", kwargs, _KWARG_PATHS)
    if "random_seed" in kwargs:
        check_seed("random_seed", kwargs["random_seed"])  # name the argument the caller wrote
    paths: dict[str, Any] = {}
    stopper = kwargs.get("stopper")
    if "stopper" in kwargs:
        if stopper not in (None, "early", "early_stopping", "EarlyStopper"):
            raise unknown_name("stopper", stopper, ["early"])
        paths["early_stopping"] = None if stopper is None else {}
    if kwargs.get("stopper_kwargs") and stopper is None:
        raise InvalidInputError("stopper_kwargs given without stopper='early'")
    bad = sorted(set(kwargs.get("training_kwargs") or {}) & _RESERVED_TRAINING_KEYS)
    if bad:
        raise InvalidInputError(
            f"training_kwargs must not set {bad}: use the pipeline's own arguments "
            "(training_loop, optimizer, optimizer_kwargs={'lr': ...}, epochs, stopper, random_seed)"
        )
    check_keys("optimizer_kwargs", kwargs.get("optimizer_kwargs") or {}, ("lr",))
    check_keys("stopper_kwargs", kwargs.get("stopper_kwargs") or {}, EARLY_STOPPING_OPTIONS)
    check_keys("training_kwargs", kwargs.get("training_kwargs") or {}, training_options())
    for key, value in kwargs.items():
        target = _KWARG_PATHS[key]
        if key == "stopper":
            continue
        if isinstance(target, tuple):  # a section's options, given as a mapping
            if not isinstance(value or {}, Mapping):
                raise InvalidInputError(f"{key} must be a mapping, got {value!r}")
            paths.update({f"{target[0]}.{k}": v for k, v in (value or {}).items()})
        else:
            paths[target] = value
    return paths
