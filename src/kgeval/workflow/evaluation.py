"""The workflow's evaluation rules: which triples are filtered, restriction by labels, re-evaluation.

- training reads only the training split;
- early stopping evaluates on the validation split, filtering with training + validation
  (the validation triples are themselves known answers);
- the final evaluation runs on the test split, filtering with training + validation + test
  (``filter_validation_when_testing=False``: training + test);
- test triples never influence training or model selection.

A protocol preset (:mod:`kgeval.presets`, the ``protocol`` evaluation option) replaces these filter sets by
its tool's (:meth:`kgeval.presets.Preset.filter_sets`): LibKGE, TorchKGE, DGL-KE, AmpliGraph and GraphVite
filter validation with the test triples too ("filtered with test", LibKGE's model selection).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import presets
from ..errors import InvalidInputError, unknown_name
from ..triples import restrict_mask


def resolve_whitelist(values, mapping: Mapping[str, int], size: int, kind: str) -> list[int] | None:
    """Map a whitelist of labels and/or ids to sorted unique ids (``None`` = no whitelist).

    Strings are looked up as labels first; a string of digits that is not a label is read
    as an id, unless some labels are digit strings themselves (WN18RR's synset offsets): then it is
    an error. Unknown labels raise :class:`~kgeval.errors.UnknownNameError`.
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
            if not _id_text(v):
                raise unknown_name(kind, v, mapping)
            if _digit_labels(mapping):
                # WN18RR's labels are digit strings ('00001740'): '1740' read as id 1740 selected
                # another entity ('00311113') without a word
                same = [k for k in mapping if _id_text(k) and int(k) == int(v)]
                hint = f" (did you mean the label {same[0]!r}?)" if same else ""
                raise InvalidInputError(
                    f"{kind} whitelist: {v!r} is not a label{hint}, and this dataset's labels are digit strings, "
                    "so it is not read as an id either; give the label exactly, or ids as integers (Python API)")
            v = int(v)
        if not isinstance(v, (int, np.integer)):
            raise InvalidInputError(f"{kind} whitelist: entries must be labels or ids, got {v!r}")
        if not 0 <= int(v) < size:
            raise InvalidInputError(f"{kind} whitelist: id {int(v)} outside [0, {size})")
        ids.add(int(v))
    if not ids:
        raise InvalidInputError(f"the {kind} whitelist is empty")
    return sorted(ids)


def _digit_labels(mapping: Mapping[str, int]) -> bool:
    """Whether any label of ``mapping`` is a string of digits (then a digit string is ambiguous)."""
    return any(isinstance(k, str) and _id_text(k) for k in mapping)


def _id_text(text: str) -> bool:
    """Whether ``text`` reads as an id: ASCII digits (``str.isdigit`` also takes ``'²'``, which ``int`` refuses)."""
    text = text.strip()
    return text.isascii() and text.isdigit()


def check_split_to_evaluate(dataset, split: str, relations, entities, *, purpose: str = "") -> None:
    """Refuse an empty split, or one the whitelists leave empty."""
    triples = dataset.split(split)
    if len(triples) == 0:
        raise InvalidInputError(f"dataset {dataset.name!r} has no {split} triples to evaluate on{purpose}")
    if (relations or entities) and not restrict_mask(triples, relations, entities).any():
        raise InvalidInputError(f"the evaluation whitelist matches none of the {len(triples)} {split} triples{purpose}")


def testing_filter_sets(dataset, *, filter_validation_when_testing: bool = True, preset=None) -> dict[str, np.ndarray]:
    """Known triples filtered when evaluating on test (the test triples themselves always are); ``preset``: a
    protocol preset's name (:mod:`kgeval.presets`), None = kgeval's (training + validation)."""
    return _preset_sets(dataset, "test", preset, filter_validation_when_testing)


def validation_filter_sets(dataset, *, preset=None) -> dict[str, np.ndarray]:
    """Known triples filtered when evaluating on validation: training (+ validation itself, implicit); under
    a ``preset`` that filters with test (LibKGE's "filtered with test"), training + test."""
    return _preset_sets(dataset, "valid", preset, True)


def _preset_sets(dataset, split: str, preset, filter_validation_when_testing: bool) -> dict[str, np.ndarray]:
    from ..data.splits import split_attribute

    names = presets.get(preset or presets.DEFAULT).filter_sets(
        split, filter_validation_when_testing=filter_validation_when_testing)
    return {split_attribute(n): dataset.split(split_attribute(n)) for n in names}


def _protocol_of(evaluate_kwargs) -> str:
    """The protocol preset ``evaluate`` will follow with these keyword arguments."""
    if evaluate_kwargs.get("protocol") is not None:
        return presets.get(evaluate_kwargs["protocol"]).name
    from ..evaluation.options import as_options

    return as_options(evaluate_kwargs.get("options")).protocol


def dataset_type_constraints(dataset, value, entity_types=None):
    """The type constraints ``value`` for ``dataset``: ``"train"`` (inferred from its training split, widened by
    the entity-type file ``entity_types`` when given), a type-constraint file (labels through the dataset's maps,
    see :mod:`kgeval.data.type_files`), or a :class:`~kgeval.data.types.CandidateSets` as it is."""
    from ..data.type_files import read_entity_types, read_type_constraints
    from ..data.types import CandidateSets

    if entity_types is not None and value != "train":
        raise InvalidInputError("entity types widen the constraints inferred from training (type constraints "
                                f"'train'), got type constraints {value!r}")
    if value is None or isinstance(value, CandidateSets):
        return value
    sizes = dict(num_entities=dataset.num_entities, num_relations=dataset.num_relations)
    if value == "train":
        types = None if entity_types is None else read_entity_types(entity_types, num_entities=dataset.num_entities,
                                                                    entity_to_id=dataset.entity_to_id)
        return CandidateSets.from_triples(dataset.training, entity_types=types, source="training", **sizes)
    return read_type_constraints(value, entity_to_id=dataset.entity_to_id, relation_to_id=dataset.relation_to_id,
                                 **sizes)


def evaluate_model(model, dataset, *, split: str = "test", filter_validation_when_testing: bool = True,
                   evaluation_relation_whitelist=None, evaluation_entity_whitelist=None, progress: bool = False,
                   drop_unseen: bool | None = None, known=None, type_constraints=None, entity_types=None,
                   **evaluate_kwargs):
    """Evaluate ``model`` on one split of ``dataset`` with the pipeline's filtering rules.

    ``split="test"``: filter training + validation + test (or training + test);
    ``split="valid"``: filter training + validation, never reading the test split.
    ``drop_unseen``: drop the split's triples with an entity or relation unseen in training (None:
    as the dataset was loaded, i.e. dropped already by ``get_dataset(..., drop_unseen=True)``, else as the
    protocol preset says: dropped under ``protocol="pykeen"``, kept otherwise). Either way
    ``results.protocol["unseen"]`` says how many there are. The filter sets follow the preset too
    (:func:`testing_filter_sets`, :func:`validation_filter_sets`).
    ``known``: a :class:`~kgeval.evaluation.KnownTriples` of those filter sets, built once by a caller
    that evaluates the same split repeatedly (its filter indexes are then reused).
    ``type_constraints``: ``"train"``, a type-constraint file or a CandidateSets (default: the ``options``' own),
    resolved with the dataset's labels (:func:`dataset_type_constraints`; ``entity_types``: an entity-type file
    widening ``"train"``). Returns :class:`~kgeval.Results`.
    """
    import torch

    from ..data import get_dataset
    from ..data.splits import split_attribute
    from ..evaluation import evaluate

    dataset = get_dataset(dataset)
    split_name = split_attribute(split)
    if split_name == "training":
        raise InvalidInputError("evaluate on 'valid' or 'test'; training triples are used for filtering")
    check_model_fits(model, dataset)
    rel = resolve_whitelist(evaluation_relation_whitelist, dataset.relation_to_id, dataset.num_relations, "relation")
    ent = resolve_whitelist(evaluation_entity_whitelist, dataset.entity_to_id, dataset.num_entities, "entity")
    check_split_to_evaluate(dataset, split_name, rel, ent)
    preset = _protocol_of(evaluate_kwargs)
    if split_name == "testing":
        filters = testing_filter_sets(dataset, filter_validation_when_testing=filter_validation_when_testing,
                                      preset=preset)
    else:
        filters = validation_filter_sets(dataset, preset=preset)
    already = split_name in dataset.dropped
    if drop_unseen is None and presets.get(preset).drop_unseen:
        drop_unseen = True
    if drop_unseen is False and already:
        raise InvalidInputError(f"dataset {dataset.name!r} was loaded with drop_unseen=True: its {split} split has no "
                                "unseen triples left to keep (the model has no entities for them)")
    drop = bool(drop_unseen) and not already
    if known is not None:
        filters = known
    if type_constraints is None:  # a run's saved options may name them (a file path is read with the labels)
        type_constraints = getattr(evaluate_kwargs.get("options"), "type_constraints", None)
    if type_constraints is not None or entity_types is not None:
        evaluate_kwargs["type_constraints"] = dataset_type_constraints(dataset, type_constraints, entity_types)
    model.eval()
    with torch.no_grad():
        results = evaluate(model, dataset.split(split_name), filter_triples=filters, restrict_entities=ent,
                           restrict_relations=rel, progress=progress, drop_unseen=drop, **evaluate_kwargs)
    import dataclasses

    # the dataset's record: the same counts, plus what only labels tell (Unicode twins) and an earlier drop
    results.protocol["unseen"] = dataclasses.asdict(dataset.unseen(split_name, drop=drop))
    return results


def check_model_fits(model, dataset) -> None:
    """Refuse a model whose entity / relation counts differ from the dataset's."""
    ne, nr = getattr(model, "num_entities", None), getattr(model, "num_relations", None)
    if ne != dataset.num_entities or (nr is not None and nr != dataset.num_relations):
        raise InvalidInputError(
            f"the model has {ne} entities / {nr} relations but dataset {dataset.name!r} has "
            f"{dataset.num_entities} / {dataset.num_relations}: it was trained on another dataset"
        )


def metric_direction(metric: str) -> str:
    """``"maximize"`` for increasing metrics (MRR, hits@k, AMRI), ``"minimize"`` for mean rank etc."""
    from .. import metrics
    from ..keys import parse_key

    _, _, name = parse_key(metric)
    return "maximize" if metrics.get(name).increasing else "minimize"

