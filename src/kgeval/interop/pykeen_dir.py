"""PyKEEN pipeline output directories (``PipelineResult.save_to_directory``, pykeen 1.11.1)::

    DIR/trained_model.pkl     the whole model, torch.save'd (a pickle: loading it runs code)
    DIR/training_triples/     the training TriplesFactory (entity_to_id / relation_to_id, triples)
    DIR/metadata.json         the pipeline's ``metadata=`` argument (often {})
    DIR/results.json          PyKEEN's own metrics, losses and times

PyKEEN does not record the dataset (unless the user put ``dataset`` in the metadata), so its
valid/test splits come from a kgeval dataset (``dataset=`` / ``--dataset``). That dataset's
labels are mapped to the model's ids through the saved factory, and its training split must be
the factory's training triples. Evaluation follows PyKEEN's pipeline: test triples ranked with
training + validation + test filtered.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from .._compat import install_hint
from .._json import read_json
from ..data import get_dataset
from ..errors import InvalidInputError
from .pykeen import PyKEENScorer

__all__ = ["load_pipeline_directory", "load_dataset_scorer", "DatasetScorer", "converted_model", "pykeen_dataset_name",
           "pykeen_losses"]

MODEL_FILE = "trained_model.pkl"
TRAINING_DIR = "training_triples"


def load_pipeline_directory(directory, *, trust_pickle: bool = False):
    """``(model, training factory, metadata)`` of a PyKEEN pipeline directory.

    ``trained_model.pkl`` is a pickle: unpickling runs code stored in the file, so it is only
    loaded with ``trust_pickle=True``; otherwise :class:`~kgeval.errors.InvalidInputError`.
    """
    directory = Path(directory)
    model_path = directory / MODEL_FILE
    if not directory.is_dir() or not model_path.is_file():
        raise InvalidInputError(f"{directory} is not a PyKEEN pipeline directory (no {MODEL_FILE}; "
                                "PipelineResult.save_to_directory writes one)")
    if not trust_pickle:
        raise InvalidInputError(
            f"{model_path} is a pickle, and loading a pickle runs code stored in the file: pass "
            "--trust-pickle / trust_pickle=True only for a directory you trust (e.g. one you wrote)")
    if not (directory / TRAINING_DIR).is_dir():
        raise InvalidInputError(f"{directory} has no {TRAINING_DIR}/ (saved with save_training=False?): "
                                "the label -> id maps of the model are unknown")
    try:
        from pykeen.triples import TriplesFactory
    except ImportError:
        raise InvalidInputError(f"reading a PyKEEN directory needs pykeen: {install_hint('pykeen')}") from None
    model = torch.load(model_path, map_location="cpu", weights_only=False)
    factory = TriplesFactory.from_path_binary(directory / TRAINING_DIR)
    meta_path = directory / "metadata.json"
    # the one bounded reader: a link to /dev/zero, a FIFO or '[' x 100000 is a named error
    metadata = read_json(meta_path, "PyKEEN's metadata.json", root=directory) if os.path.lexists(meta_path) else {}
    return model, factory, metadata if isinstance(metadata, dict) else {}


def pykeen_dataset_name(metadata: dict, dataset) -> str | os.PathLike:
    """The kgeval dataset for a PyKEEN directory: ``dataset`` or the metadata's ``dataset`` entry."""
    if dataset is not None:
        return dataset
    name = metadata.get("dataset")
    if isinstance(name, str) and name:
        return name
    raise InvalidInputError("PyKEEN's pipeline directory does not record its dataset: name it with "
                            "--dataset / dataset= (e.g. nations, fb15k237, or a directory)")


class DatasetScorer:
    """A :class:`PyKEENScorer` seen through a kgeval dataset's ids (entity ``i`` of the dataset is
    the model's ``entity_ids[i]``), so the dataset's splits and whitelists are used as they are."""

    def __init__(self, scorer: PyKEENScorer, dataset, factory):
        self.scorer = scorer
        self.num_entities, self.num_relations = dataset.num_entities, dataset.num_relations
        if (self.num_entities, self.num_relations) != (scorer.num_entities, scorer.num_relations):
            raise InvalidInputError(
                f"the PyKEEN model has {scorer.num_entities} entities / {scorer.num_relations} relations but "
                f"dataset {dataset.name!r} has {self.num_entities} / {self.num_relations}")
        self.device = scorer.device
        self.entity_subsets = scorer.entity_subsets
        self.entity_ids = _ids(dataset.entity_labels, factory.entity_to_id, "entity", dataset.name)
        self.relation_ids = _ids(dataset.relation_labels, factory.relation_to_id, "relation", dataset.name)
        mine = np.stack([self.entity_ids[dataset.training[:, 0]], self.relation_ids[dataset.training[:, 1]],
                         self.entity_ids[dataset.training[:, 2]]], 1)
        theirs = factory.mapped_triples.cpu().numpy()
        if not np.array_equal(np.unique(mine, axis=0), np.unique(theirs, axis=0)):
            raise InvalidInputError(f"dataset {dataset.name!r}'s training triples are not the PyKEEN model's "
                                    "training triples: the model was trained on another dataset")
        self._ent = torch.as_tensor(self.entity_ids, device=self.device)
        self._rel = torch.as_tensor(self.relation_ids, device=self.device)

    @property
    def score_bytes(self) -> float:
        return self.scorer.score_bytes

    def _cols(self, entities):
        return self._ent if entities is None else self._ent[entities if isinstance(entities, slice)
                                                            else torch.as_tensor(entities, device=self.device)]

    def score_tails(self, heads, relations, entities=None):
        return self.scorer.score_tails(self._ent[heads.to(self.device)], self._rel[relations.to(self.device)],
                                       entities=self._cols(entities))

    def score_heads(self, relations, tails, entities=None):
        return self.scorer.score_heads(self._rel[relations.to(self.device)], self._ent[tails.to(self.device)],
                                       entities=self._cols(entities))

    def score_triples(self, heads, relations, tails):
        return self.scorer.score_triples(*self._map(heads, relations, tails))

    def score_head_triples(self, heads, relations, tails):
        return self.scorer.score_head_triples(*self._map(heads, relations, tails))

    def _map(self, h, r, t):
        return self._ent[h.to(self.device)], self._rel[r.to(self.device)], self._ent[t.to(self.device)]

    def eval(self):
        self.scorer.model.eval()
        return self


def _ids(labels, mapping, kind: str, name: str) -> np.ndarray:
    missing = [x for x in labels if x not in mapping]
    if missing:
        raise InvalidInputError(f"dataset {name!r} has {len(missing)} {kind} label(s) the PyKEEN model does not "
                                f"know, e.g. {missing[0]!r}: it was trained on another dataset")
    ids = np.asarray([mapping[x] for x in labels], dtype=np.int64)
    shared, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():  # two labels on one row: their scores would tie and another row go unscored
        row = int(shared[counts > 1][0])
        both = [x for x, i in zip(labels, ids) if i == row][:2]
        raise InvalidInputError(f"the PyKEEN model's {kind}_to_id gives {kind} labels {both[0]!r} and {both[1]!r} "
                                f"of dataset {name!r} the same id {row}: the label -> id map is not one-to-one")
    return ids


def load_dataset_scorer(directory, dataset=None, *, trust_pickle: bool = False, data_dir=None):
    """``(model, scorer, dataset)``: the PyKEEN model of ``directory``, a :class:`DatasetScorer` of it on
    the kgeval ``dataset`` (named, or recorded in the directory's metadata), and that dataset.

    Evaluating it and saving a kgeval run directory is :func:`kgeval.workflow.foreign.evaluate_pykeen_directory`.
    """
    model, factory, metadata = load_pipeline_directory(directory, trust_pickle=trust_pickle)
    ds = get_dataset(pykeen_dataset_name(metadata, dataset), data_dir=data_dir)
    return model, DatasetScorer(PyKEENScorer(model, triples_factory=factory), ds, factory), ds


def converted_model(model, scorer: DatasetScorer):
    """``from_pykeen(model)`` with its rows reordered to the dataset's ids."""
    from .pykeen_convert import from_pykeen

    out = from_pykeen(model)
    ent, rel = torch.as_tensor(scorer.entity_ids), torch.as_tensor(scorer.relation_ids)
    if out.inverse_relations:
        rel = torch.cat([rel, rel + out.num_relations])
    with torch.no_grad():
        out.entity.weight.copy_(out.entity.weight[ent])
        out.relation.weight.copy_(out.relation.weight[rel])
    return out


def pykeen_losses(source: Path) -> list[float]:
    """The training losses of PyKEEN's ``results.json`` in ``source``, or [] when it records none."""
    try:
        losses = read_json(source / "results.json", "PyKEEN's results.json", root=source).get("losses") or []
        return [float(x) for x in losses]
    except (InvalidInputError, ValueError, TypeError, AttributeError):
        return []
