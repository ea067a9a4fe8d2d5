"""Train a model on a dataset and evaluate it, in one call: :func:`pipeline`.

The protocol, fixed here so that every number is comparable:

- training reads only the training split;
- early stopping (``stopper="early"``) evaluates on the validation split, filtering
  with training + validation (the validation triples are themselves known answers);
- the final evaluation runs on the test split, filtering with training + validation +
  test (``filter_validation_when_testing=False``: training + test);
- test triples never influence training or model selection.

``kgeval.pipeline`` is both this module and, by a small trick at the bottom, callable as
the function :func:`pipeline` itself (PyKEEN spells it ``pykeen.pipeline.pipeline``).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._validation import check_seed
from .errors import InvalidInputError, unknown_name

DEFAULT_METRIC = "both.realistic.inverse_harmonic_mean_rank"

#: Per-model defaults: the configurations of ``benchmarks/train.py`` (chosen on validation
#: MRR), scaled down where needed so that Nations trains in seconds on 2 CPU cores with a
#: sensible test MRR (measured: ComplEx 0.78, DistMult 0.78, TuckER 0.77, RotatE 0.59,
#: TransE 0.42, PairRE 0.79). Explicit arguments override them key by key.
def _lcwa(dim, epochs, lr, **train):
    return {"model_kwargs": {"dim": dim, "inverse_relations": True}, "training_loop": "lcwa",
            "optimizer_kwargs": {"lr": lr}, "training_kwargs": {"batch_size": 128, **train}, "epochs": epochs}


def _slcwa(dim, epochs, lr, **model):
    return {"model_kwargs": {"dim": dim, **model}, "training_loop": "slcwa", "optimizer_kwargs": {"lr": lr},
            "training_kwargs": {"batch_size": 256, "num_negatives": 32, "loss": "nssa",
                                "loss_kwargs": {"margin": 6.0, "temperature": 1.0}},
            "epochs": epochs}


MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "complex": _lcwa(200, 100, 1e-2, loss="softmax", regularizer="n3", regularizer_weight=1e-2),
    "distmult": _lcwa(200, 100, 1e-2, loss="softmax", regularizer="n3", regularizer_weight=1e-2),
    "tucker": _lcwa(64, 100, 5e-3, label_smoothing=0.1),
    "rotate": _slcwa(64, 100, 1e-2),
    "transe": _slcwa(64, 100, 1e-2, normalize_entities=False),
    "pairre": _slcwa(64, 100, 1e-2),
}
_FALLBACK_DEFAULTS: dict[str, Any] = {"model_kwargs": {}, "training_loop": "lcwa", "optimizer_kwargs": {},
                                      "training_kwargs": {}, "epochs": 50}

# keywords of kgeval.training.train that pipeline() sets itself
_RESERVED_TRAINING_KEYS = {"loop", "optimizer", "lr", "epochs", "stopper", "seed", "progress", "num_entities"}


_STOPPER_KEYS = {"metric", "frequency", "patience", "relative_delta", "larger_is_better", "evaluate_kwargs"}


def _training_keys() -> set[str]:
    from .training import TrainingConfig

    return set(TrainingConfig.option_names()) - _RESERVED_TRAINING_KEYS


def _check_keywords(what: str, given: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise InvalidInputError(f"{what}: unknown option(s) {unknown}; allowed: {sorted(allowed)}")


def model_defaults(model: str) -> dict[str, Any]:
    """The default configuration for ``model`` (a deep copy, safe to modify)."""
    return json.loads(json.dumps(MODEL_DEFAULTS.get(str(model).lower(), _FALLBACK_DEFAULTS)))


# ---------------------------------------------------------------------------- result
@dataclass
class PipelineResult:
    """What :func:`pipeline` produced.

    ``results``: the :class:`~kgeval.Results` of the final evaluation; ``model``: the trained
    model; ``training``: the :class:`~kgeval.training.TrainingResult`; ``timings``: seconds
    spent training and evaluating; ``configuration``: every resolved setting (JSON-able).
    """

    results: Any
    model: Any
    training: Any
    timings: dict[str, float]
    configuration: dict[str, Any]
    dataset: Any = field(default=None, repr=False)

    @property
    def losses(self) -> list[float]:
        return list(self.training.losses)

    def metadata(self) -> dict[str, Any]:
        """``config.json``'s content: configuration, versions and dataset hashes."""
        return {
            "configuration": self.configuration,
            "versions": versions(),
            "dataset": {
                "name": getattr(self.dataset, "name", None),
                "hashes": self.dataset.hashes() if self.dataset is not None else None,
                "summary": self.dataset.summary() if self.dataset is not None else None,
            },
            "timings": self.timings,
        }

    def save(self, directory: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write ``config.json``, ``results.json``, ``rank_table.npz``, ``model.pt``, ``losses.json``.

        Files are written into a temporary directory beside ``directory`` which is then
        renamed into place, so an error never leaves a half-written output directory. An
        existing non-empty ``directory`` is an error unless ``overwrite=True``.
        """
        target = Path(directory).expanduser().absolute()
        if target.exists() and (not target.is_dir() or any(target.iterdir())) and not overwrite:
            raise InvalidInputError(f"output directory {target} already exists and is not empty")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            _write_json(tmp / "config.json", self.metadata())
            self.results.save_json(tmp / "results.json")
            self.results.rank_table.save(tmp / "rank_table.npz")
            self.model.save(tmp / "model.pt")
            _write_json(tmp / "losses.json", {"losses": self.losses, "training": self.training.to_dict()})
            if target.exists():
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                target.rename(old)
                tmp.rename(target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return target


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def versions() -> dict[str, str]:
    import torch

    from . import __version__

    return {"kgeval": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


# ---------------------------------------------------------------------------- helpers
def dataset_reference(dataset, loaded) -> str:
    """How a configuration names its dataset so that ``get_dataset`` finds it again.

    The canonical name of a registered dataset, the absolute path of a directory, else the
    dataset's own name (in-memory datasets cannot be re-loaded from a configuration).
    """
    from .data.registry import lookup

    if isinstance(dataset, (str, os.PathLike)):
        info = lookup(str(dataset))
        if info is not None:
            return info.name
        return str(Path(dataset).expanduser().absolute())
    return getattr(loaded, "reference", None) or loaded.name


def resolve_whitelist(values, mapping: Mapping[str, int], size: int, kind: str) -> list[int] | None:
    """Map a whitelist of labels and/or ids to sorted unique ids (``None`` = no whitelist).

    Strings are looked up as labels first; a string of digits that is not a label is read
    as an id. Unknown labels raise :class:`~kgeval.errors.UnknownNameError`.
    """
    if values is None:
        return None
    if isinstance(values, (str, int, np.integer)):
        values = [values]
    ids: set[int] = set()
    for v in values:
        if isinstance(v, (bool, np.bool_)):
            raise InvalidInputError(f"{kind} whitelist: invalid entry {v!r}")
        if isinstance(v, str):
            if v in mapping:
                ids.add(int(mapping[v]))
                continue
            if not v.strip().isdigit():
                raise unknown_name(kind, v, mapping)
            v = int(v)
        if not isinstance(v, (int, np.integer)):
            raise InvalidInputError(f"{kind} whitelist: entries must be labels or ids, got {v!r}")
        if not 0 <= int(v) < size:
            raise InvalidInputError(f"{kind} whitelist: id {int(v)} outside [0, {size})")
        ids.add(int(v))
    if not ids:
        raise InvalidInputError(f"the {kind} whitelist is empty")
    return sorted(ids)


def restrict_mask(triples: np.ndarray, relations: list[int] | None, entities: list[int] | None) -> np.ndarray:
    """Which triples survive the whitelists (relation allowed, head and tail allowed)."""
    keep = np.ones(len(triples), dtype=bool)
    if relations is not None:
        keep &= np.isin(triples[:, 1], relations)
    if entities is not None:
        keep &= np.isin(triples[:, 0], entities) & np.isin(triples[:, 2], entities)
    return keep


def testing_filter_sets(dataset, *, filter_validation_when_testing: bool = True) -> dict[str, np.ndarray]:
    """Known triples filtered when evaluating on test (the test triples themselves always are)."""
    sets = {"training": dataset.training}
    if filter_validation_when_testing:
        sets["validation"] = dataset.validation
    return sets


def validation_filter_sets(dataset) -> dict[str, np.ndarray]:
    """Known triples filtered when evaluating on validation: training (+ validation itself, implicit)."""
    return {"training": dataset.training}


def evaluate_model(
    model,
    dataset,
    *,
    split: str = "test",
    filter_validation_when_testing: bool = True,
    evaluation_relation_whitelist=None,
    evaluation_entity_whitelist=None,
    progress: bool = False,
    **evaluate_kwargs,
):
    """Evaluate ``model`` on one split of ``dataset`` with the pipeline's filtering rules.

    ``split="test"``: filter training + validation + test (or training + test);
    ``split="valid"``: filter training + validation, never reading the test split.
    Returns :class:`~kgeval.Results`.
    """
    from .data import get_dataset
    from .data.io import normalize_split
    from .evaluation import evaluate

    dataset = get_dataset(dataset)
    split_name = normalize_split(split)
    if split_name == "training":
        raise InvalidInputError("evaluate on 'valid' or 'test'; training triples are used for filtering")
    _check_model_fits(model, dataset)
    rel = resolve_whitelist(evaluation_relation_whitelist, dataset.relation_to_id, dataset.num_relations, "relation")
    ent = resolve_whitelist(evaluation_entity_whitelist, dataset.entity_to_id, dataset.num_entities, "entity")
    triples = dataset.split(split_name)
    if len(triples) == 0:
        raise InvalidInputError(f"dataset {dataset.name!r} has no {split_name} triples to evaluate on")
    if not restrict_mask(triples, rel, ent).any():
        raise InvalidInputError(f"the evaluation whitelist matches none of the {len(triples)} {split_name} triples")
    if split_name == "testing":
        filters = testing_filter_sets(dataset, filter_validation_when_testing=filter_validation_when_testing)
    else:
        filters = validation_filter_sets(dataset)
    import torch

    model.eval()
    with torch.no_grad():
        return evaluate(model, triples, filter_triples=filters, restrict_entities=ent, restrict_relations=rel,
                        progress=progress, **evaluate_kwargs)


def _check_model_fits(model, dataset) -> None:
    ne, nr = getattr(model, "num_entities", None), getattr(model, "num_relations", None)
    if ne != dataset.num_entities or (nr is not None and nr != dataset.num_relations):
        raise InvalidInputError(
            f"the model has {ne} entities / {nr} relations but dataset {dataset.name!r} has "
            f"{dataset.num_entities} / {dataset.num_relations}: it was trained on another dataset"
        )


def metric_direction(metric: str) -> str:
    """``"maximize"`` for increasing metrics (MRR, hits@k, AMRI), ``"minimize"`` for mean rank etc."""
    from . import metrics
    from .keys import parse_key

    _, _, name = parse_key(metric)
    return "maximize" if metrics.get(name).increasing else "minimize"


#: Graphs with at most this many entities train on one torch thread by default (see pipeline()).
SMALL_GRAPH_ENTITIES = 1000


def resolve_num_threads(num_threads: int | None, num_entities: int) -> int | None:
    """The torch thread count to use: explicit, 1 for small graphs, else None (torch's default)."""
    if num_threads is not None:
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
            raise InvalidInputError(f"num_threads must be a positive integer, got {num_threads!r}")
        return num_threads
    return 1 if num_entities <= SMALL_GRAPH_ENTITIES else None


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run with ``torch.set_num_threads(n)`` (``None`` = unchanged), restoring the old value."""
    import torch

    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n is not None:
            torch.set_num_threads(old)


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (CPU) so that a pipeline run is reproducible."""
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------- pipeline
def pipeline(
    *,
    dataset,
    model: str,
    model_kwargs: Mapping[str, Any] | None = None,
    training_loop: str | None = None,
    training_kwargs: Mapping[str, Any] | None = None,
    optimizer: str = "adam",
    optimizer_kwargs: Mapping[str, Any] | None = None,
    epochs: int | None = None,
    stopper: str | None = None,
    stopper_kwargs: Mapping[str, Any] | None = None,
    evaluation_relation_whitelist: Iterable | None = None,
    evaluation_entity_whitelist: Iterable | None = None,
    filter_validation_when_testing: bool = True,
    evaluation_split: str = "test",
    evaluation_kwargs: Mapping[str, Any] | None = None,
    random_seed: int = 42,
    device=None,
    progress: bool = True,
    data_dir=None,
    drop_unseen: bool = False,
    callback=None,
    num_threads: int | None = None,
) -> PipelineResult:
    """Train ``model`` on ``dataset`` and evaluate it; returns a :class:`PipelineResult`.

    Parameters
    ----------
    dataset:
        a name (``"nations"``, ``"fb15k-237"``), a directory, or a :class:`~kgeval.data.Dataset`.
    model, model_kwargs:
        a name from :func:`kgeval.models.model_names` and its options (``dim``, ...).
    training_loop, training_kwargs, optimizer, optimizer_kwargs, epochs:
        passed to :func:`kgeval.training.train` (``optimizer_kwargs`` holds ``lr``);
        unset values take the per-model defaults of :data:`MODEL_DEFAULTS`.
    stopper, stopper_kwargs:
        ``None`` or ``"early"``: an :class:`~kgeval.training.EarlyStopper` on the validation
        split (``frequency``, ``patience``, ``relative_delta``, ``metric``).
    evaluation_relation_whitelist, evaluation_entity_whitelist:
        labels or ids; evaluation triples outside them are dropped and only whitelisted
        entities are candidates (also for early stopping).
    filter_validation_when_testing:
        filter validation triples too in the final test evaluation (default, PyKEEN's).
    evaluation_split:
        ``"test"`` (default) or ``"valid"`` (used by hyper-parameter search: the test split
        is then never read).
    random_seed:
        seeds model initialisation, training and the global RNGs.
    num_threads:
        torch CPU threads during the run (restored afterwards). Default: 1 for small graphs
        (at most :data:`SMALL_GRAPH_ENTITIES` entities), where intra-op parallelism costs far
        more than it gains (Nations/ComplEx: 0.015 s per epoch on 1 thread, 1-2.5 s on 2
        threads of a busy 2-core machine), else torch's default.
    """
    from .data import get_dataset
    from .data.io import normalize_split
    from .models import model_names
    from .training import EarlyStopper

    t_start = time.perf_counter()
    ds = get_dataset(dataset, data_dir=data_dir, drop_unseen=drop_unseen)
    model_key = str(model).lower()
    if model_key not in model_names():
        raise unknown_name("model", model, model_names())
    eval_split = normalize_split(evaluation_split)
    if eval_split == "training":
        raise InvalidInputError("evaluation_split must be 'test' or 'valid'")
    random_seed = check_seed("random_seed", random_seed)  # the one seed rule, shared with train() and hpo

    defaults = model_defaults(model_key)
    model_kw = {**defaults["model_kwargs"], **dict(model_kwargs or {})}
    loop = training_loop or defaults["training_loop"]
    train_kw = dict(training_kwargs or {})
    bad = sorted(set(train_kw) & _RESERVED_TRAINING_KEYS)
    if bad:
        raise InvalidInputError(
            f"training_kwargs must not set {bad}: use the pipeline's own arguments "
            "(training_loop, optimizer, optimizer_kwargs={'lr': ...}, epochs, stopper, random_seed)"
        )
    if training_loop is None or str(training_loop).lower() == defaults["training_loop"]:
        train_kw = {**defaults["training_kwargs"], **train_kw}
    opt_kw = dict(optimizer_kwargs or {})
    if str(optimizer).lower() == "adam":
        opt_kw = {**defaults["optimizer_kwargs"], **opt_kw}
    unknown_opt = sorted(set(opt_kw) - {"lr"})
    if unknown_opt:
        raise InvalidInputError(f"optimizer_kwargs supports only 'lr', got {unknown_opt}")
    n_epochs = defaults["epochs"] if epochs is None else epochs
    if stopper not in (None, "early", "early_stopping", "EarlyStopper"):
        raise unknown_name("stopper", stopper, ["early"])
    if stopper is None and stopper_kwargs:
        raise InvalidInputError("stopper_kwargs given without stopper='early'")
    _check_keywords("stopper_kwargs", stopper_kwargs or {}, _STOPPER_KEYS)
    _check_keywords("training_kwargs", train_kw, _training_keys())

    rel_wl = resolve_whitelist(evaluation_relation_whitelist, ds.relation_to_id, ds.num_relations, "relation")
    ent_wl = resolve_whitelist(evaluation_entity_whitelist, ds.entity_to_id, ds.num_entities, "entity")
    if len(ds.training) == 0:
        raise InvalidInputError(f"dataset {ds.name!r} has no training triples")
    eval_triples = ds.split(eval_split)
    if len(eval_triples) == 0:
        raise InvalidInputError(f"dataset {ds.name!r} has no {eval_split} triples to evaluate on")
    if (rel_wl or ent_wl) and not restrict_mask(eval_triples, rel_wl, ent_wl).any():
        raise InvalidInputError(f"the evaluation whitelist matches none of the {len(eval_triples)} {eval_split} triples")
    eval_kw = dict(evaluation_kwargs or {})
    restrict = {"restrict_relations": rel_wl, "restrict_entities": ent_wl}

    stopper_obj = None
    stop_kw = dict(stopper_kwargs or {})
    if stopper is not None:
        if len(ds.validation) == 0:
            raise InvalidInputError(f"early stopping needs validation triples; dataset {ds.name!r} has none")
        if (rel_wl or ent_wl) and not restrict_mask(ds.validation, rel_wl, ent_wl).any():
            raise InvalidInputError("the evaluation whitelist matches no validation triple (needed for early stopping)")
        stop_kw.setdefault("metric", DEFAULT_METRIC)
        stop_kw.setdefault("larger_is_better", metric_direction(stop_kw["metric"]) == "maximize")
        stop_eval_kw = {**eval_kw, **restrict, **dict(stop_kw.get("evaluate_kwargs") or {})}
        stopper_obj = EarlyStopper(ds.validation, validation_filter_sets(ds),
                                   **{**stop_kw, "evaluate_kwargs": stop_eval_kw})

    configuration = {
        "dataset": dataset_reference(dataset, ds),
        "drop_unseen": bool(drop_unseen),
        "model": model_key,
        "model_kwargs": model_kw,
        "training_loop": str(loop).lower(),
        "training_kwargs": train_kw,
        "optimizer": str(optimizer).lower(),
        "optimizer_kwargs": opt_kw,
        "epochs": n_epochs,
        "stopper": None if stopper is None else "early",
        "stopper_kwargs": stop_kw if stopper is not None else None,
        "evaluation_relation_whitelist": rel_wl,
        "evaluation_entity_whitelist": ent_wl,
        "filter_validation_when_testing": bool(filter_validation_when_testing),
        "evaluation_split": "test" if eval_split == "testing" else "valid",
        "evaluation_kwargs": eval_kw,
        "random_seed": random_seed,
        "device": None if device is None else str(device),
    }

    threads = resolve_num_threads(num_threads, ds.num_entities)
    configuration["num_threads"] = threads
    with torch_threads(threads):
        return _run(ds, model_key, model_kw, loop, train_kw, optimizer, opt_kw, n_epochs, stopper_obj, random_seed,
                    device, progress, callback, eval_split, filter_validation_when_testing, rel_wl, ent_wl, eval_kw,
                    configuration, t_start)


def _run(ds, model_key, model_kw, loop, train_kw, optimizer, opt_kw, n_epochs, stopper_obj, random_seed, device,
         progress, callback, eval_split, filter_validation_when_testing, rel_wl, ent_wl, eval_kw, configuration,
         t_start) -> PipelineResult:
    from .models import get_model
    from .training import train

    seed_everything(random_seed)
    kge = get_model(model_key, ds.num_entities, ds.num_relations, seed=random_seed, **model_kw)
    if device is not None:
        kge = kge.to(device)
    t0 = time.perf_counter()
    training = train(kge, ds.training, loop=loop, optimizer=optimizer, lr=opt_kw.get("lr"), epochs=n_epochs,
                     stopper=stopper_obj, seed=random_seed, progress=progress, callback=callback, **train_kw)
    t1 = time.perf_counter()
    results = evaluate_model(
        kge, ds, split=eval_split, filter_validation_when_testing=filter_validation_when_testing,
        evaluation_relation_whitelist=rel_wl, evaluation_entity_whitelist=ent_wl, progress=progress, **eval_kw,
    )
    t2 = time.perf_counter()
    timings = {"training": t1 - t0, "evaluation": t2 - t1, "total": t2 - t_start}
    return PipelineResult(results=results, model=kge, training=training, timings=timings,
                          configuration=configuration, dataset=ds)


def load_output(directory: str | os.PathLike) -> dict[str, Any]:
    """Read a pipeline output directory's ``config.json`` (raises InvalidInputError if absent or corrupt)."""
    path = Path(directory) / "config.json"
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidInputError(f"{directory} is not a kgeval output directory (no config.json)") from None
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"{path}: unreadable ({exc})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("configuration"), dict):
        raise InvalidInputError(f"{path}: not a kgeval pipeline configuration")
    return meta


class _CallableModule(types.ModuleType):
    """Lets ``kgeval.pipeline(...)`` work although ``kgeval.pipeline`` is also this module."""

    def __call__(self, *args, **kwargs) -> PipelineResult:
        return pipeline(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
