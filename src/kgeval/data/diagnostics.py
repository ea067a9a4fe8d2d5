"""Dataset diagnostics: what lets a model score without learning, found in the triples alone.

:func:`diagnose` checks each evaluation split against the training split and the training split's
relations against each other:

- **unseen entities and relations**: an entity of the split that is the head or the tail of no training
  triple (a relation that labels none), and the split's triples that contain one. A model ranks them with
  embeddings training never updated; whether they are kept or dropped (``drop_unseen``, PyKEEN's default)
  changes the headline numbers.
- **already in training**: split triples that are training triples too.
- **reverse leakage**: split triples ``(h, r, t)`` for which some training triple ``(t, r', h)`` exists, any
  ``r'`` (``r' = r`` too: a symmetric relation leaks its own reverse). A rule "``(t, r', h)`` implies
  ``(h, r, t)``" answers them (Dettmers et al., 2018, showed it reaches state-of-the-art scores on WN18).
- **duplicate leakage**: split triples ``(h, r, t)`` for which some training triple ``(h, r', t)`` with
  ``r' != r`` exists.
- **inverse, duplicate and symmetric relations**: relation pairs whose training ``(head, tail)`` sets have a
  Jaccard similarity ``|A ∩ B| / |A ∪ B|`` of at least ``threshold`` (0.97, Toutanova & Chen, 2015), ``B``
  reversed for inverses, as PyKEEN's ``Sealant`` (``pykeen.triples.leakage``) finds them; a relation similar
  to its own reverse is symmetric.
- **Cartesian-product relations** (Akrami et al., 2020, §4.3): relations with more than one triple that fill at
  least ``cartesian_threshold`` (80%) of ``heads x tails``, the product of their distinct heads and tails (as
  their released code): "every such pair is true" predicts them.

Everything is counted on distinct id triples with sorted arrays and one sparse product over relations
(``relations x (head, tail) pairs``); memory grows with the number of triples, never with entities squared.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..errors import InvalidInputError

__all__ = ["diagnose", "Diagnosis", "SplitDiagnosis", "RelationPair", "CartesianRelation"]

#: Toutanova & Chen (2015), who built FB15k-237 by removing FB15k's near-duplicate and inverse relations
JACCARD_THRESHOLD = 0.97
#: Akrami et al. (2020), §4.3
CARTESIAN_THRESHOLD = 0.8


@dataclass(frozen=True)
class SplitDiagnosis:
    """The findings of one evaluation split against the training split (counts of distinct items)."""

    split: str
    num_triples: int
    unseen_entities: int
    triples_with_unseen_entity: int
    unseen_relations: int
    triples_with_unseen_relation: int
    in_training: int
    reverse_in_training: int
    duplicate_in_training: int


@dataclass(frozen=True)
class RelationPair:
    """Two relations whose training ``(head, tail)`` sets overlap (``second`` reversed for an inverse pair)."""

    kind: str  # "duplicate", "inverse" or "symmetric" (first == second)
    first: int
    second: int
    jaccard: float
    first_label: str = ""
    second_label: str = ""


@dataclass(frozen=True)
class CartesianRelation:
    """A relation whose training triples fill ``ratio`` of ``heads x tails``."""

    relation: int
    num_triples: int
    num_heads: int
    num_tails: int
    ratio: float
    label: str = ""


@dataclass
class Diagnosis:
    """What :func:`diagnose` found; ``str()`` is a readable table with one verdict per finding, :meth:`to_dict`
    the same as JSON-ready data."""

    dataset: str
    num_entities: int
    num_relations: int
    num_training: int
    splits: dict[str, SplitDiagnosis]
    relation_pairs: list[RelationPair] = field(default_factory=list)
    cartesian: list[CartesianRelation] = field(default_factory=list)
    threshold: float = JACCARD_THRESHOLD
    cartesian_threshold: float = CARTESIAN_THRESHOLD
    #: the triples the relation pairs and Cartesian products are found in: ``"all"`` splits or ``"training"``
    relations_on: str = "all"

    def pairs(self, kind: str) -> list[RelationPair]:
        """The relation pairs of one ``kind``: ``"duplicate"``, ``"inverse"`` or ``"symmetric"``."""
        return [p for p in self.relation_pairs if p.kind == kind]

    def verdicts(self) -> list[str]:
        """One line per finding, with its count and share (see :mod:`kgeval.data.diagnostics`)."""
        from .diagnostics_text import verdicts

        return verdicts(self)

    def to_dict(self) -> dict:
        """Every count and pair as plain JSON-ready data, with the verdict lines."""
        from dataclasses import asdict

        return {"dataset": self.dataset, "num_entities": self.num_entities, "num_relations": self.num_relations,
                "num_training": self.num_training, "threshold": self.threshold,
                "cartesian_threshold": self.cartesian_threshold, "relations_on": self.relations_on,
                "splits": {k: asdict(v) for k, v in self.splits.items()},
                "relation_pairs": [asdict(p) for p in self.relation_pairs],
                "cartesian": [asdict(c) for c in self.cartesian], "verdicts": self.verdicts()}

    def __str__(self) -> str:
        from .diagnostics_text import render

        return render(self)


def diagnose(dataset, *, threshold: float = JACCARD_THRESHOLD, cartesian_threshold: float = CARTESIAN_THRESHOLD,
             relations_on: str = "all", data_dir=None) -> Diagnosis:
    """Diagnose a dataset's evaluation splits for unseen entities and leakage, and its relations for
    inverse, duplicate, symmetric and Cartesian-product relations (see :mod:`kgeval.data.diagnostics`).

    Parameters
    ----------
    dataset : str or Dataset
        a dataset name (``kgeval datasets`` lists them), a directory of ``train``/``valid``/``test``
        files, or a :class:`kgeval.data.Dataset`.
    threshold : float
        the Jaccard similarity at or above which two relations are duplicates / inverses,
        ``J(A, B) = |A ∩ B| / |A ∪ B|`` over their training ``(head, tail)`` pairs.
    cartesian_threshold : float
        the share of ``heads x tails`` at or above which a relation is a Cartesian product.
    relations_on : {"all", "training"}
        the triples the relation pairs and Cartesian products are found in: every split (default: what the
        graph says of its relations, as Toutanova & Chen measured FB15k) or the training split only (as
        PyKEEN's ``Sealant`` on a training factory). A random split lowers the Jaccard similarity of two exact
        inverses on the training split alone to about ``p / (2 - p)`` for a training share ``p`` (0.875 on
        WN18), below the 0.97 threshold.
    data_dir : str, optional
        where large datasets are read from (as :func:`kgeval.data.get_dataset`).

    Returns
    -------
    Diagnosis

    Examples
    --------
    >>> from kgeval import diagnose
    >>> d = diagnose("nations")
    >>> d.splits["test"].num_triples, d.splits["test"].unseen_entities
    (201, 0)
    >>> diagnose("kinships").splits["test"].reverse_in_training   # of 1,074 test triples
    875
    """
    from . import Dataset, get_dataset

    for name, value in (("threshold", threshold), ("cartesian_threshold", cartesian_threshold)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise InvalidInputError(f"{name} must be a number in (0, 1], got {value!r}")
    if relations_on not in ("all", "training"):
        from ..errors import unknown_name

        raise unknown_name("relations_on", relations_on, ("all", "training"))
    ds = dataset if isinstance(dataset, Dataset) else get_dataset(dataset, data_dir=data_dir)
    train = _distinct(ds.training)
    if len(train) == 0:
        raise InvalidInputError(f"dataset {ds.name} has no training triples: nothing to diagnose against")
    splits, known = {}, [train]
    for split, triples in (("validation", ds.validation), ("test", ds.testing)):
        if triples is not None and len(triples):
            known.append(_distinct(triples))
            splits[split] = _split_diagnosis(split, known[-1], train)
    graph = train if relations_on == "training" else _distinct(np.concatenate(known))
    relation_labels = list(ds.relation_labels or [])
    pairs = [_labelled(p, relation_labels) for p in relation_pairs(graph, ds.num_relations, threshold)]
    cartesian = [_labelled(c, relation_labels) for c in cartesian_relations(graph, cartesian_threshold)]
    return Diagnosis(dataset=ds.name, num_entities=ds.num_entities, num_relations=ds.num_relations,
                     num_training=len(train), splits=splits, relation_pairs=pairs, cartesian=cartesian,
                     threshold=float(threshold), cartesian_threshold=float(cartesian_threshold),
                     relations_on=relations_on)


def _labelled(item, labels: list):
    """``item`` with the relations' labels (where the dataset has labels of its own)."""
    import dataclasses

    def label(r):
        return str(labels[r]) if r < len(labels) else str(r)

    if isinstance(item, RelationPair):
        return dataclasses.replace(item, first_label=label(item.first), second_label=label(item.second))
    return dataclasses.replace(item, label=label(item.relation))


def _distinct(triples) -> np.ndarray:
    """The distinct rows of an ``(n, 3)`` id array (a repeated line is one fact), in first-seen order."""
    return _distinct_rows(np.asarray(triples, dtype=np.int64).reshape(-1, 3))


def _distinct_rows(arr: np.ndarray) -> np.ndarray:
    if len(arr) == 0:
        return arr
    _, first = np.unique(_row_ids(arr)[0], return_index=True)
    return arr[np.sort(first)]


def _row_ids(*blocks: np.ndarray) -> list[np.ndarray]:
    """One integer id per distinct row across ``blocks`` (each ``(n, k)`` non-negative ints), returned per block:
    mixed-radix keys where they fit in int64 (fast), else :func:`numpy.unique` over rows (any id range)."""
    rows = np.concatenate(blocks)
    bases = rows.max(axis=0).astype(object) + 1 if len(rows) else []
    if len(rows) and np.prod(bases) < 2**62:
        keys = np.zeros(len(rows), dtype=np.int64)
        for column, base in zip(rows.T, bases):
            keys = keys * int(base) + column
    else:
        _, keys = np.unique(rows, axis=0, return_inverse=True)
    keys = keys.reshape(-1)
    return np.split(keys, np.cumsum([len(b) for b in blocks])[:-1])


def _member(rows: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Which of ``rows`` (``(n, k)`` ints) occur among ``reference`` (``(m, k)``)."""
    if len(rows) == 0 or len(reference) == 0:
        return np.zeros(len(rows), dtype=bool)
    a, b = _row_ids(rows, reference)
    return np.isin(a, b)


def _split_diagnosis(split: str, triples: np.ndarray, train: np.ndarray) -> SplitDiagnosis:
    seen_entities = np.union1d(train[:, 0], train[:, 2])
    head_seen, tail_seen = np.isin(triples[:, 0], seen_entities), np.isin(triples[:, 2], seen_entities)
    relation_seen = np.isin(triples[:, 1], np.unique(train[:, 1]))
    split_entities = np.union1d(triples[:, 0], triples[:, 2])
    # duplicate: the pair (h, t) in training under another relation. The pair occurs in training with
    # k distinct relations; one of them is r itself exactly when (h, r, t) is a training triple.
    in_training = _member(triples, train)
    split_pairs, train_pairs = _row_ids(triples[:, [0, 2]], train[:, [0, 2]])
    keys, counts = np.unique(train_pairs, return_counts=True)
    at = np.clip(np.searchsorted(keys, split_pairs), 0, len(keys) - 1)
    relations_of_pair = np.where(keys[at] == split_pairs, counts[at], 0)
    duplicate = relations_of_pair - in_training > 0
    return SplitDiagnosis(
        split=split, num_triples=len(triples),
        unseen_entities=int(np.setdiff1d(split_entities, seen_entities).size),
        triples_with_unseen_entity=int((~(head_seen & tail_seen)).sum()),
        unseen_relations=int(np.setdiff1d(np.unique(triples[:, 1]), train[:, 1]).size),
        triples_with_unseen_relation=int((~relation_seen).sum()),
        in_training=int(in_training.sum()),
        reverse_in_training=int(_member(triples[:, [2, 0]], train[:, [0, 2]]).sum()),
        duplicate_in_training=int(duplicate.sum()))


def relation_pairs(train: np.ndarray, num_relations: int, threshold: float) -> list[RelationPair]:
    """The duplicate (``J(A, B)``), inverse (``J(A, reversed B)``) and symmetric (``J(A, reversed A)``) relations
    of the distinct training triples ``train`` at Jaccard similarity ``>= threshold``, strongest first.

    Each relation is a row of a sparse 0/1 matrix over the (head, tail) pairs of the triples and of their
    reverses (one numbering for both, as PyKEEN's ``mapped_triples_to_sparse_matrices``); the intersections of
    every relation pair are one sparse product, and only pairs that intersect are ever looked at.
    """
    rel, inv, size = relation_matrices(train, num_relations)
    found = []
    for kind, product in (("duplicate", rel @ rel.T), ("inverse", rel @ inv.T)):
        product = product.tocoo()
        a, b, inter = product.row, product.col, product.data.astype(np.float64)
        jaccard = inter / (size[a] + size[b] - inter)
        keep = jaccard >= threshold
        for i, j, value in zip(a[keep], b[keep], jaccard[keep]):
            if i == j:
                if kind == "inverse":  # a relation similar to its own reverse
                    found.append(RelationPair("symmetric", int(i), int(i), float(value)))
            elif i < j:  # each unordered pair once (both products are symmetric)
                found.append(RelationPair(kind, int(i), int(j), float(value)))
    return sorted(found, key=lambda p: (-p.jaccard, p.kind, p.first, p.second))


def relation_matrices(train: np.ndarray, num_relations: int):
    """``(rel, inv, size)`` of the distinct triples ``train``: sparse 0/1 matrices ``relations x (head, tail)
    pairs`` with ``rel[r, (h, t)] = 1`` for a triple ``(h, r, t)`` and ``inv[r, (h, t)] = 1`` for ``(t, r, h)``
    (one numbering of the pairs of the triples and of their reverses, as PyKEEN's
    ``mapped_triples_to_sparse_matrices``), and the number of pairs of each relation. ``rel @ rel.T`` counts
    the pairs two relations share; ``inv @ rel.T`` those one shares with the other reversed."""
    num_relations = max(int(num_relations), int(train[:, 1].max()) + 1)
    forward_keys, backward_keys = _row_ids(train[:, [0, 2]], train[:, [2, 0]])
    _, pair_id = np.unique(np.concatenate([forward_keys, backward_keys]), return_inverse=True)
    pair_id = pair_id.reshape(-1)
    forward, backward = pair_id[: len(train)], pair_id[len(train):]
    shape = (num_relations, int(pair_id.max()) + 1)
    ones = np.ones(len(train), dtype=np.int64)
    rel = sp.csr_matrix((ones, (train[:, 1], forward)), shape=shape)
    inv = sp.csr_matrix((ones, (train[:, 1], backward)), shape=shape)
    return rel, inv, np.asarray(rel.sum(axis=1)).reshape(-1)


def cartesian_relations(train: np.ndarray, threshold: float) -> list[CartesianRelation]:
    """Relations of the distinct triples ``train`` with more than one triple that fill at least ``threshold`` of
    ``heads x tails``, largest first (the rule of Akrami et al.'s released code, ``idirlab/kgcompletion``,
    on distinct pairs with the exact ratio; it rounds the ratio to two decimals)."""
    relations, num_triples = np.unique(train[:, 1], return_counts=True)
    heads = _distinct_rows(train[:, [1, 0]])[:, 0]
    tails = _distinct_rows(train[:, [1, 2]])[:, 0]
    num_heads = np.bincount(heads, minlength=relations.max() + 1)[relations]
    num_tails = np.bincount(tails, minlength=relations.max() + 1)[relations]
    ratio = num_triples / (num_heads.astype(np.float64) * num_tails)
    keep = (ratio >= threshold) & (num_triples >= 2)  # as Akrami et al.'s released code: more than one triple
    out = [CartesianRelation(int(r), int(n), int(h), int(t), float(q))
           for r, n, h, t, q in zip(relations[keep], num_triples[keep], num_heads[keep], num_tails[keep], ratio[keep])]
    return sorted(out, key=lambda c: (-c.num_triples, c.relation))
