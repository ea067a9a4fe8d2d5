"""Candidate counts of a dataset's evaluation tasks, without a model: what a null model needs.

For an evaluation triple ``(h, r, t)`` the tail task's number of candidates is, as in the
evaluator (:mod:`kgeval.evaluation.full`),

    Cᵢ = E − #{known answers of (h, r, ?)} + 1     (filtered; the true answer counted back in)
    Cᵢ = E                                          (unfiltered)

with E the dataset's number of entities and the known answers those of the evaluator's filter
index (:class:`~kgeval.evaluation.FilterIndex`) over the evaluation triples plus the workflow's
filter sets (:mod:`kgeval.workflow.evaluation`: test filters training + validation + test, or
training + test; validation filters training + validation). The head task is symmetric.

Counts are kept as histograms ``{C: number of tasks}``: a few hundred distinct values even on
FB15k-237, so they ship with the package and give exact null distributions without the files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..data.splits import canonical_split
from ..errors import InvalidInputError
from ..filtering import FilterIndex, query_keys
from ..ranks import SIDE_HEAD, SIDE_TAIL

#: the per-task sides, in the order the evaluator ranks them
TASK_SIDES = {"head": SIDE_HEAD, "tail": SIDE_TAIL}
SIDES = ("head", "tail", "both")


@dataclass(frozen=True)
class NullProtocol:
    """Which evaluation a null model describes (the choices that change the candidate counts)."""

    split: str = "test"
    filtered: bool = True
    #: test split only: whether validation triples are filtered too (the workflow's default)
    filter_validation_when_testing: bool = True
    #: triples with an entity or relation unseen in training dropped, vocabulary from training (PyKEEN)
    drop_unseen: bool = False

    def __post_init__(self):
        object.__setattr__(self, "split", canonical_split(self.split))
        if self.split == "train":
            raise InvalidInputError("split must be 'valid' or 'test'; training triples are the filter, not evaluated")
        for name in ("filtered", "filter_validation_when_testing", "drop_unseen"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise InvalidInputError(f"{name} must be True or False, got {value!r}")
            object.__setattr__(self, name, bool(value))
        if not (self.filtered and self.split == "test"):
            # the option changes nothing here: one canonical protocol, one table entry
            object.__setattr__(self, "filter_validation_when_testing", True)

    @property
    def filter_sets(self) -> tuple[str, ...]:
        """The splits whose triples are filtered (empty when unfiltered)."""
        if not self.filtered:
            return ()
        if self.split == "valid":
            return ("train", "valid")
        return ("train", "valid", "test") if self.filter_validation_when_testing else ("train", "test")

    @property
    def key(self) -> str:
        """A stable name, e.g. ``test/filtered:train+valid+test/keep_unseen``."""
        filt = f"filtered:{'+'.join(self.filter_sets)}" if self.filtered else "unfiltered"
        return f"{self.split}/{filt}/{'drop' if self.drop_unseen else 'keep'}_unseen"

    def describe(self) -> str:
        filt = f"filtered with {' + '.join(self.filter_sets)}" if self.filtered else "unfiltered (all entities)"
        unseen = ("triples with entities or relations unseen in training dropped (vocabulary from training)"
                  if self.drop_unseen else "triples with unseen entities kept (vocabulary from all splits)")
        return f"{self.split} split, both sides ranked, {filt}; {unseen}; ranks uniform on 1..C_i, independent"

    def to_dict(self) -> dict:
        return {"split": self.split, "filtered": self.filtered,
                "filter_validation_when_testing": self.filter_validation_when_testing,
                "drop_unseen": self.drop_unseen, "filter_sets": list(self.filter_sets)}


@dataclass
class CandidateHistogram:
    """``counts[j]`` tasks have ``values[j]`` candidates (values sorted, distinct)."""

    values: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, c: np.ndarray) -> CandidateHistogram:
        values, counts = np.unique(np.asarray(c, dtype=np.int64), return_counts=True)
        return cls(values.astype(np.int64), counts.astype(np.int64))

    @classmethod
    def from_pairs(cls, pairs) -> CandidateHistogram:
        arr = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        return cls(arr[:, 0].copy(), arr[:, 1].copy())

    def to_pairs(self) -> list[list[int]]:
        return [[int(v), int(n)] for v, n in zip(self.values, self.counts)]

    def expand(self) -> np.ndarray:
        """Every task's C, sorted: the one array all moments are computed from (deterministic sums)."""
        return np.repeat(self.values, self.counts)

    def __add__(self, other: CandidateHistogram) -> CandidateHistogram:
        return CandidateHistogram.of(np.concatenate([self.expand(), other.expand()]))

    @property
    def num_tasks(self) -> int:
        return int(self.counts.sum())


def candidate_counts(dataset, protocol: NullProtocol) -> dict[str, np.ndarray]:
    """Per-task number of candidates of ``dataset``'s evaluation split, ``{"head": C, "tail": C}``
    in evaluation-triple order (the evaluator's ``num_candidates`` column, without scoring)."""
    triples = dataset.split(protocol.split)
    if len(triples) == 0:
        raise InvalidInputError(f"dataset {dataset.name!r} has no {protocol.split} triples")
    ne, nr = dataset.num_entities, dataset.num_relations
    if not protocol.filtered:
        return {side: np.full(len(triples), ne, dtype=np.int64) for side in TASK_SIDES}
    # the evaluator's known triples: the evaluation triples first, then the filter sets, read in place
    # (not concatenated) and indexed only for the evaluation's queries (one pass over each set, not a
    # sort of every known triple per side), as the evaluator does
    known = [triples] + [dataset.split(s) for s in protocol.filter_sets if s != protocol.split]
    out = {}
    for name, side in TASK_SIDES.items():
        keys = query_keys(triples, side, nr)
        index = FilterIndex(known, side=side, num_entities=ne, num_relations=nr, queries=keys)
        _, num_known = index.ranges(torch.as_tensor(keys))
        out[name] = ne - num_known.numpy().astype(np.int64) + 1
    return out


def candidate_histograms(dataset, protocol: NullProtocol) -> dict[str, CandidateHistogram]:
    """:func:`candidate_counts` as histograms, ``both`` included."""
    counts = candidate_counts(dataset, protocol)
    hist = {side: CandidateHistogram.of(c) for side, c in counts.items()}
    hist["both"] = CandidateHistogram.of(np.concatenate(list(counts.values())))
    return hist
