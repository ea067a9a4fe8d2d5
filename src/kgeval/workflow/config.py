"""One configuration object for the workflow: :class:`PipelineConfig`.

A tree of small frozen records — model, training, optimizer, early stopping, evaluation,
restriction — plus dataset reference, seed, device and threads. ``to_dict()`` is what a
run saves as ``config.json``'s ``"configuration"``; ``from_dict()`` reads it back (unknown
keys raise :class:`UnknownConfigKeyError` with a suggestion). Sections are flat, so every
setting has a dotted path: ``model.dim``, ``optimizer.lr``, ``training.batch_size``,
``early_stopping.patience``, ``evaluation.split``, ``seed``. Hyper-parameter search sets
those paths with :meth:`PipelineConfig.with_paths`.

:meth:`PipelineConfig.from_kwargs` maps the keyword arguments of
:func:`kgeval.pipeline` (``model_kwargs``, ``training_kwargs``, ``random_seed``, ...) onto
the tree, and :meth:`PipelineConfig.to_kwargs` maps back.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._validation import check_bool, check_positive_int, check_seed
from ..errors import InvalidInputError, unknown_name
from .defaults import model_defaults
from .kwargs import (  # noqa: F401 (the key checks are public here too)
    EARLY_STOPPING_OPTIONS, UnknownConfigKeyError, check_keys, kwargs_to_paths, training_options)

def _plain(value):
    """Sequences as lists, mappings as dicts, recursively (what JSON gives back)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class ModelSpec:
    """A model name from :func:`kgeval.models.model_names` and its constructor options (``dim``, ...)."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        from ..models import baseline_names, model_names

        key = str(self.name).lower()
        if key not in model_names() + baseline_names():  # the workflow's one model-name check
            raise unknown_name("model", self.name, model_names() + baseline_names())
        object.__setattr__(self, "name", key)
        object.__setattr__(self, "options", _plain(dict(self.options)))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.options}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelSpec:
        if "name" not in d:
            raise InvalidInputError("configuration section 'model' needs a 'name'")
        return cls(d["name"], {k: v for k, v in d.items() if k != "name"})


@dataclass(frozen=True)
class TrainingSpec:
    """Training loop (``lcwa``/``slcwa``), epochs and :func:`training_options`; unset = the model's default."""

    loop: str | None = None
    epochs: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        check_keys("training", self.options, training_options())
        if self.loop is not None:
            object.__setattr__(self, "loop", str(self.loop).lower())
        object.__setattr__(self, "epochs", check_positive_int("epochs", self.epochs, allow_none=True))
        object.__setattr__(self, "options", _plain(dict(self.options)))

    def to_dict(self) -> dict[str, Any]:
        return {"loop": self.loop, "epochs": self.epochs, **self.options}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainingSpec:
        return cls(d.get("loop"), d.get("epochs"), {k: v for k, v in d.items() if k not in ("loop", "epochs")})


@dataclass(frozen=True)
class OptimizerSpec:
    """Optimizer name (``adam``, ``adagrad``) and learning rate (``None`` = the default)."""

    name: str = "adam"
    lr: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "name", str(self.name).lower())

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "lr": self.lr}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OptimizerSpec:
        check_keys("optimizer", d, ("name", "lr"))
        return cls(**d)


@dataclass(frozen=True)
class EarlyStopping:
    """Early stopping on the validation split; unset options take :class:`~kgeval.training.EarlyStopper`'s defaults."""

    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        check_keys("early_stopping", self.options, EARLY_STOPPING_OPTIONS)
        object.__setattr__(self, "options", _plain(dict(self.options)))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.options)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EarlyStopping:
        return cls(dict(d))


#: Evaluation options the pipeline sets itself: the restriction section and the progress argument.
_EVALUATION_SET_ELSEWHERE = ("restrict_entities", "restrict_relations", "progress")


@dataclass(frozen=True)
class EvaluationSpec:
    """The final evaluation: ``split`` (``test``/``valid``), validation filtering and :class:`EvaluationOptions`."""

    split: str = "test"
    filter_validation_when_testing: bool = True
    options: Any = None  # EvaluationOptions; None = all defaults

    def __post_init__(self):
        from ..evaluation.options import EvaluationOptions

        from ..data.splits import canonical_split

        split = canonical_split(self.split)
        if split == "train":
            raise InvalidInputError(f"evaluation split must be 'test' or 'valid', got {self.split!r}")
        object.__setattr__(self, "split", split)
        object.__setattr__(self, "filter_validation_when_testing",
                           check_bool("filter_validation_when_testing", self.filter_validation_when_testing))
        options = self.options
        if options is None or isinstance(options, Mapping):
            given = dict(options or {})
            clash = [k for k in given if k in _EVALUATION_SET_ELSEWHERE or k.endswith("_whitelist")]
            if clash:
                raise InvalidInputError(f"evaluation options must not set {clash}: the restriction is the "
                                        "configuration's 'restriction' (evaluation_*_whitelist), progress an argument")
            options = EvaluationOptions.from_dict(given)
        if not isinstance(options, EvaluationOptions):
            raise InvalidInputError(f"evaluation options must be EvaluationOptions or a mapping, got {options!r}")
        object.__setattr__(self, "options", options)

    def option_dict(self) -> dict[str, Any]:
        """The evaluation options this configuration fixes (those the pipeline sets itself left out)."""
        return {k: v for k, v in self.options.to_dict().items() if k not in _EVALUATION_SET_ELSEWHERE}

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "filter_validation_when_testing": self.filter_validation_when_testing,
                "options": self.option_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvaluationSpec:
        check_keys("evaluation", d, ("split", "filter_validation_when_testing", "options"))
        return cls(**d)


@dataclass(frozen=True)
class Restriction:
    """Evaluate only on these relations / between these entities (labels or ids; ``None`` = all)."""

    relations: tuple | None = None
    entities: tuple | None = None

    def __post_init__(self):
        for name in ("relations", "entities"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value) if isinstance(value, (list, tuple)) else (value,))

    def to_dict(self) -> dict[str, Any]:
        return {"relations": None if self.relations is None else list(self.relations),
                "entities": None if self.entities is None else list(self.entities)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Restriction:
        check_keys("restriction", d, ("relations", "entities"))
        return cls(**d)


_SECTIONS = {"model": ModelSpec, "training": TrainingSpec, "optimizer": OptimizerSpec,
             "early_stopping": EarlyStopping, "evaluation": EvaluationSpec, "restriction": Restriction}
#: torch's OpenMP pool segfaults for absurd counts (--threads 99999 crashed the process); no machine
#: kgeval runs on benefits from more than this
MAX_THREADS = 1024

_SCALARS = ("dataset", "drop_unseen", "seed", "device", "threads")


def _device_name(device) -> str:
    """A torch device spelling (``"cpu"``, ``"cuda"``, ``"cuda:1"``), refused by name when torch cannot read
    it (``"gpu"``, ``3``: a RuntimeError deep in ``model.to`` otherwise); availability is checked at run time."""
    import torch

    if not isinstance(device, (str, torch.device)):
        raise InvalidInputError(f"device must be a name such as 'cpu' or 'cuda:0', got {device!r}")
    try:
        return str(torch.device(device))
    except RuntimeError:
        raise InvalidInputError(f"device {str(device)!r} is not a torch device (use 'cpu', 'cuda' or 'cuda:<index>')") \
            from None


@dataclass(frozen=True)
class PipelineConfig:
    """Everything that determines a pipeline run (see the module docstring)."""

    dataset: str | None = None
    model: ModelSpec | None = None
    training: TrainingSpec = field(default_factory=TrainingSpec)
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    early_stopping: EarlyStopping | None = None
    evaluation: EvaluationSpec = field(default_factory=EvaluationSpec)
    restriction: Restriction = field(default_factory=Restriction)
    drop_unseen: bool = False
    seed: int = 42
    device: str | None = None
    threads: int | None = None

    def __post_init__(self):
        if isinstance(self.model, str):
            object.__setattr__(self, "model", ModelSpec(self.model))
        object.__setattr__(self, "seed", check_seed("seed", self.seed))
        object.__setattr__(self, "threads", check_positive_int("threads", self.threads, allow_none=True,
                                                                  maximum=MAX_THREADS))
        object.__setattr__(self, "drop_unseen", check_bool("drop_unseen", self.drop_unseen))
        if self.device is not None:
            object.__setattr__(self, "device", _device_name(self.device))

    # ------------------------------------------------------------------ dict form
    def to_dict(self) -> dict[str, Any]:
        """The JSON-able tree (``config.json``'s ``"configuration"``)."""
        out: dict[str, Any] = {k: getattr(self, k) for k in _SCALARS}
        for name in _SECTIONS:
            section = getattr(self, name)
            out[name] = None if section is None else section.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PipelineConfig:
        """Inverse of :meth:`to_dict`; also reads the flat configuration of runs saved before it existed."""
        if not isinstance(d, Mapping):
            raise InvalidInputError(f"a pipeline configuration must be a mapping, got {type(d).__name__}")
        if isinstance(d.get("model"), str) or "random_seed" in d:  # the flat form of kgeval <= 0.1 runs
            return cls.from_kwargs(**d)
        check_keys("configuration", d, _SCALARS + tuple(_SECTIONS))
        kwargs: dict[str, Any] = {k: d[k] for k in _SCALARS if k in d}
        for name, spec in _SECTIONS.items():
            if d.get(name) is not None:
                if not isinstance(d[name], Mapping):
                    raise InvalidInputError(f"configuration section {name!r} must be a mapping, got {d[name]!r}")
                kwargs[name] = spec.from_dict(d[name])
        return cls(**kwargs)

    def with_paths(self, values: Mapping[str, Any]) -> PipelineConfig:
        """A copy with dotted paths set: ``{"model.dim": 64, "optimizer.lr": 0.01, "seed": 1}``."""
        tree = self.to_dict()
        for path, value in values.items():
            head, *parts = str(path).split(".")
            if head not in tree:
                raise unknown_name("configuration path", path, [*_SCALARS, *(f"{s}.<option>" for s in _SECTIONS)])
            if parts and head in _SCALARS:
                raise UnknownConfigKeyError(f"configuration path {path!r}: {head!r} has no sub-settings")
            node, key = tree, head
            for part in parts:
                if node.get(key) is None:  # a missing level: created, then checked by from_dict
                    node[key] = {}
                if not isinstance(node[key], dict):
                    raise UnknownConfigKeyError(f"configuration path {path!r}: {key!r} has no sub-settings")
                node, key = node[key], part
            node[key] = copy.deepcopy(value)
        if "evaluation.options.protocol" in values:  # a new preset sets its options unless a path sets them too
            from ..presets import OPTION_FIELDS

            for name in OPTION_FIELDS:
                if f"evaluation.options.{name}" not in values:
                    tree["evaluation"]["options"].pop(name, None)
        return PipelineConfig.from_dict(tree)

    def replace(self, **changes) -> PipelineConfig:
        return dataclasses.replace(self, **changes)

    def training_config(self):
        """The :class:`~kgeval.training.TrainingConfig` of this (resolved) configuration."""
        from ..training import TrainingConfig

        t = self.training
        return TrainingConfig(loop=t.loop, epochs=t.epochs, optimizer=self.optimizer.name, lr=self.optimizer.lr,
                              seed=self.seed, **t.options)

    # ------------------------------------------------------------------ keyword form
    @classmethod
    def from_kwargs(cls, base: PipelineConfig | None = None, **kwargs) -> PipelineConfig:
        """Apply :func:`kgeval.pipeline`'s keyword arguments to ``base`` (default: an empty configuration)."""
        return (base or cls()).with_paths(kwargs_to_paths(kwargs))

    def to_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`kgeval.pipeline` that re-create this configuration."""
        stop = self.early_stopping
        return {
            "dataset": self.dataset, "drop_unseen": self.drop_unseen,
            "model": None if self.model is None else self.model.name,
            "model_kwargs": {} if self.model is None else dict(self.model.options),
            "training_loop": self.training.loop, "training_kwargs": dict(self.training.options),
            "optimizer": self.optimizer.name,
            "optimizer_kwargs": {} if self.optimizer.lr is None else {"lr": self.optimizer.lr},
            "epochs": self.training.epochs,
            "stopper": None if stop is None else "early", "stopper_kwargs": None if stop is None else stop.to_dict(),
            "evaluation_relation_whitelist": self.restriction.to_dict()["relations"],
            "evaluation_entity_whitelist": self.restriction.to_dict()["entities"],
            "filter_validation_when_testing": self.evaluation.filter_validation_when_testing,
            "evaluation_split": self.evaluation.split, "evaluation_kwargs": self.evaluation.option_dict(),
            "random_seed": self.seed, "device": self.device, "num_threads": self.threads,
        }

    # ------------------------------------------------------------------ defaults
    def resolve(self) -> PipelineConfig:
        """Fill unset model, training and optimizer settings with the model's defaults (:data:`MODEL_DEFAULTS`).

        Model options merge over the defaults key by key; the default training options apply
        only with the default loop, the default learning rate only with Adam.
        """
        if self.model is None:
            raise InvalidInputError("the configuration names no model")
        defaults = model_defaults(self.model.name)
        model = ModelSpec(self.model.name, {**defaults["model_kwargs"], **self.model.options})
        loop = self.training.loop or defaults["training_loop"]
        options = dict(self.training.options)
        if self.training.loop is None or self.training.loop == defaults["training_loop"]:
            options = {**defaults["training_kwargs"], **options}
        if loop == "lcwa" and "num_negatives" in options:  # given, and ignored: LCWA draws no negatives
            raise InvalidInputError(f"training.num_negatives ({options['num_negatives']}) applies to the slcwa loop "
                                    f"only; {self.model.name} trains with lcwa here, which scores every entity "
                                    "(set training.loop=slcwa, or leave num_negatives out)")
        if loop == "slcwa" and options.get("label_smoothing"):  # smooths the LCWA labels only
            raise InvalidInputError(f"training.label_smoothing ({options['label_smoothing']}) applies to the lcwa loop "
                                    f"only; {self.model.name} trains with slcwa here (set training.loop=lcwa, or "
                                    "leave label_smoothing out)")
        epochs = defaults["epochs"] if self.training.epochs is None else self.training.epochs
        lr = self.optimizer.lr
        if lr is None and self.optimizer.name == "adam":
            lr = defaults["optimizer_kwargs"].get("lr")
        return self.replace(model=model, training=TrainingSpec(loop, epochs, options),
                            optimizer=OptimizerSpec(self.optimizer.name, lr))
