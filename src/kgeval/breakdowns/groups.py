"""Groups of the tasks of a rank table: :func:`group_tasks` by relation category, answer or query entity
degree, relation, or named relation groups; :func:`grouping_data` gathers what they count on. See
:mod:`kgeval.breakdowns`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .._validation import Side, check_positive_int, check_positive_number
from ..errors import InvalidInputError, unknown_name
from ..ranks import RankTable
from ..triples import as_triples
from .categories import CATEGORIES, UNSEEN, degree_buckets, entity_degrees, relation_categories

__all__ = ["OTHER", "GROUPINGS", "Grouping", "GroupingData", "grouping_data", "group_tasks"]

#: the group of the relations no user group names
OTHER = "other"
#: the groupings :func:`group_tasks` knows (a mapping of group names to relations is the fifth)
GROUPINGS = ("category", "frequency", "query_frequency", "relation")
_SYNONYMS = {"category": "category", "categories": "category", "relation_category": "category",
             "relation_categories": "category", "frequency": "frequency", "answer_frequency": "frequency",
             "query_frequency": "query_frequency", "relation": "relation", "relations": "relation"}


@dataclass(frozen=True)
class GroupingData:
    """What a grouping reads besides the rank table.

    ``counted``: the triples categories and degrees are counted on (``counted_on`` says which, in
    words); ``evaluated``: the evaluated split's triples, row ``triple_index`` of each task (the
    frequency groupings only); ``relation_labels``: the relations' names (by id); ``threshold``:
    the categories' threshold; ``quantiles``: the number of frequency buckets.
    """

    counted: np.ndarray | None = None
    counted_on: str = "the training split"
    evaluated: np.ndarray | None = None
    relation_labels: tuple[str, ...] | None = None
    threshold: float = 1.5
    quantiles: int = 4


#: a split's name in the rule's words (other spellings are the dataset's to refuse)
_SPLIT_WORDS = {"train": "training", "training": "training", "valid": "validation", "validation": "validation",
                "dev": "validation", "val": "validation", "test": "test", "testing": "test"}


def grouping_data(*, dataset=None, split: str = "test", train_triples=None, eval_triples=None,
                  relation_labels=None, splits=None, threshold: float = 1.5, quantiles: int = 4) -> GroupingData:
    """The :class:`GroupingData` of a dataset, or of triples given as arrays.

    Parameters
    ----------
    dataset : kgeval.data.Dataset, optional
        Gives the counted triples (its ``splits``), the evaluated triples (its ``split``) and the relation
        names. Not together with ``train_triples`` / ``eval_triples``.
    split : str
        The evaluated split of ``dataset`` (``test`` or ``valid``).
    train_triples, eval_triples : array-like of shape (n, 3), optional
        Without a dataset: the triples categories and degrees are counted on, and the evaluated triples
        (row ``triple_index`` of each task; the frequency breakdowns only).
    relation_labels : sequence of str, optional
        The relations' names by id (default: the dataset's).
    splits : sequence of str, optional
        The dataset's splits categories and degrees are counted on (default ``("train",)``).
    threshold : float
        A category side is ``1`` below it (default 1.5).
    quantiles : int
        The number of frequency buckets (default 4).

    Returns
    -------
    GroupingData

    Examples
    --------
    >>> import numpy as np
    >>> data = grouping_data(train_triples=np.array([[0, 0, 1]]), threshold=2)
    >>> data.counted_on, data.threshold
    ('the triples given (train_triples)', 2.0)
    """
    threshold = check_positive_number("threshold", threshold)
    quantiles = check_positive_int("quantiles", quantiles)
    if dataset is None:
        if splits is not None:
            raise InvalidInputError("splits= names splits of a dataset: pass dataset= too (or the counted triples "
                                    "as train_triples=)")
        counted = None if train_triples is None else as_triples("train_triples", train_triples)
        evaluated = None if eval_triples is None else as_triples("eval_triples", eval_triples)
        labels = None if relation_labels is None else tuple(str(x) for x in relation_labels)
        return GroupingData(counted, "the triples given (train_triples)", evaluated, labels, threshold, quantiles)
    if train_triples is not None or eval_triples is not None:
        raise InvalidInputError("give a dataset or train_triples= / eval_triples=, not both")
    if not hasattr(dataset, "split"):
        raise InvalidInputError(f"dataset must be a kgeval Dataset, got {type(dataset).__name__}")
    splits = ("train",) if splits is None else (splits,) if isinstance(splits, str) else tuple(splits)
    if not splits:
        raise InvalidInputError("splits: name at least one split to count on (train, valid, test)")
    counted = np.concatenate([as_triples(str(s), dataset.split(s), allow_empty=True) for s in splits])
    words = list(dict.fromkeys(_SPLIT_WORDS.get(str(s).strip().lower(), str(s)) for s in splits))
    counted_on = ("the " + " and ".join(words) + (" splits" if len(words) > 1 else " split"))
    labels = relation_labels if relation_labels is not None else getattr(dataset, "relation_labels", None)
    labels = None if labels is None else tuple(str(x) for x in labels)
    return GroupingData(counted, counted_on, as_triples(str(split), dataset.split(split)), labels, threshold,
                        quantiles)


@dataclass(frozen=True)
class Grouping:
    """Every task of a rank table in one group: ``codes[i]`` is task i's position in ``labels``.

    ``by``: the grouping (``category``, ``frequency``, ``query_frequency``, ``relation``, ``groups``);
    ``rule``: how the groups are made, in words; ``members``: the relation ids of each group where
    groups are sets of relations (empty for the frequency groupings).
    """

    by: str
    labels: tuple[str, ...]
    codes: np.ndarray
    rule: str
    members: Mapping[str, tuple[int, ...]]

    def mask(self, label: str) -> np.ndarray:
        """The tasks of one group (boolean, one per row of the rank table)."""
        if label not in self.labels:
            raise unknown_name("group", label, self.labels)
        return self.codes == self.labels.index(label)

    def sizes(self) -> dict[str, int]:
        """The number of tasks of every group."""
        counts = np.bincount(self.codes, minlength=len(self.labels))
        return {label: int(c) for label, c in zip(self.labels, counts)}


def _by_name(by) -> str:
    if isinstance(by, Mapping):
        return "groups"
    if not isinstance(by, str):
        raise InvalidInputError(f"by must be one of {', '.join(GROUPINGS)} or a mapping of group names to "
                                f"relations, got {type(by).__name__}")
    key = by.strip().lower().replace("-", "_").replace(" ", "_")
    if key not in _SYNONYMS:
        raise unknown_name("breakdown", by, GROUPINGS)
    return _SYNONYMS[key]


def _relations(table: RankTable) -> np.ndarray:
    if table.relation is None or np.any(table.relation < 0):
        raise InvalidInputError("this breakdown needs the relation of every task: the rank table has no relation "
                                "column (or unknown relations, -1); rank tables made by kgeval's evaluator have it")
    return table.relation


def _relation_name(labels, r: int) -> str:
    return str(labels[r]) if labels is not None and 0 <= r < len(labels) else str(r)


def group_tasks(table: RankTable, by, data: GroupingData = GroupingData()) -> Grouping:
    """Assign every task of ``table`` to a group.

    Parameters
    ----------
    table : RankTable
        The tasks (its ``relation`` column; for the frequency groupings also ``triple_index`` and ``side``).
    by : str or mapping
        ``"category"``, ``"frequency"`` (the answer's degree), ``"query_frequency"``, ``"relation"``, or
        ``{group name: relations}`` (ids, or names from ``data.relation_labels``; the rest is ``other``).
    data : GroupingData
        The counted and evaluated triples, labels, threshold and number of buckets.

    Returns
    -------
    Grouping

    Examples
    --------
    >>> import numpy as np
    >>> from kgeval import RankTable
    >>> table = RankTable.from_ranks([1, 2, 3], num_candidates=5, relation=[0, 1, 0])
    >>> g = group_tasks(table, "category", GroupingData(counted=np.array([[0, 0, 1], [0, 0, 2], [3, 1, 4]])))
    >>> g.sizes()
    {'1-1': 1, '1-N': 2, 'N-1': 0, 'N-N': 0}
    """
    if not isinstance(table, RankTable):
        raise InvalidInputError(f"a breakdown needs a RankTable, got {type(table).__name__}")
    name = _by_name(by)
    if name == "category":
        return _categories(table, data)
    if name in ("frequency", "query_frequency"):
        return _frequency(table, data, answer=name == "frequency")
    if name == "relation":
        rel = _relations(table)
        ids, codes = np.unique(rel, return_inverse=True)
        labels = tuple(_relation_name(data.relation_labels, int(r)) for r in ids)
        return Grouping("relation", labels, codes.astype(np.int64), "one group per relation",
                        {lab: (int(r),) for lab, r in zip(labels, ids)})
    return _user_groups(table, by, data)


def _categories(table: RankTable, data: GroupingData) -> Grouping:
    rel = _relations(table)
    if data.counted is None:
        raise InvalidInputError("the relation categories are counted on training triples: pass train_triples= "
                                "(or a dataset)")
    num = None if data.relation_labels is None else len(data.relation_labels)
    cats = relation_categories(data.counted, num_relations=num, threshold=data.threshold,
                               counted_on=data.counted_on)
    per_relation = cats.categories
    present = [per_relation[r] if r < per_relation.size else UNSEEN for r in range(int(rel.max()) + 1)]
    labels = CATEGORIES + ((UNSEEN,) if UNSEEN in set(present[r] for r in np.unique(rel)) else ())
    code_of = np.array([labels.index(c) if c in labels else -1 for c in present], dtype=np.int64)
    members = {lab: tuple(r for r in range(len(present)) if present[r] == lab) for lab in labels}
    return Grouping("category", labels, code_of[rel], cats.rule(), members)


def _frequency(table: RankTable, data: GroupingData, *, answer: bool) -> Grouping:
    what = "answer" if answer else "query"
    if data.counted is None or data.evaluated is None:
        raise InvalidInputError(f"the {what}-frequency breakdown needs the training triples (train_triples=) and "
                                "the evaluated split's triples (eval_triples=), or a dataset and its split")
    evaluated = as_triples("eval_triples", data.evaluated)
    index = table.triple_index
    if index is None or np.any(index < 0) or int(index.max()) >= len(evaluated):
        raise InvalidInputError(f"the {what}-frequency breakdown needs each task's evaluation triple: the rank "
                                f"table's triple_index column is missing, unknown (-1) or beyond the "
                                f"{len(evaluated):,} triples given")
    if table.relation is not None and not np.array_equal(evaluated[index, 1], table.relation):
        i = int(np.flatnonzero(evaluated[index, 1] != table.relation)[0])
        raise InvalidInputError(f"the triples given are not the evaluated split: task {i} has relation "
                                f"{int(table.relation[i])} but triple {int(index[i])} has relation "
                                f"{int(evaluated[index[i], 1])} (another split, or a restricted evaluation?)")
    if np.any(table.side == Side.NONE):
        raise InvalidInputError(f"the {what}-frequency breakdown needs the side of every task (head or tail): the "
                                "rank table has tasks of unspecified side")
    degrees = entity_degrees(data.counted, int(evaluated[:, [0, 2]].max()) + 1)
    rows = evaluated[index]
    # a head task (?, r, t) has answer h and query entity t; a tail task the other way round
    head_task = table.side == Side.HEAD
    entity = np.where(head_task == answer, rows[:, 0], rows[:, 2])
    codes, labels = degree_buckets(degrees[entity], data.quantiles)
    rule = (f"the {what} entity's degree (the number of triples of {data.counted_on} it occurs in, as head or "
            f"tail) in {data.quantiles} quantile buckets of the tasks; bucket i holds the degrees above the "
            f"(i-1)/{data.quantiles} quantile, up to the i/{data.quantiles} quantile (equal degrees never split)")
    return Grouping("frequency" if answer else "query_frequency", tuple(labels), codes, rule, {})


def _resolve(item, labels, lookup, group: str) -> int:
    """A relation id from an id or a name."""
    if isinstance(item, (bool, np.bool_)):
        raise InvalidInputError(f"group {group!r}: {item!r} is not a relation")
    if isinstance(item, (int, np.integer)):
        r = int(item)
    elif isinstance(item, str) and item in lookup:
        return lookup[item]
    elif isinstance(item, str) and item.strip().lstrip("-").isdigit():
        r = int(item.strip())
    elif isinstance(item, str):
        raise unknown_name("relation", item, list(lookup) or ["(no relation names given: use relation ids)"])
    else:
        raise InvalidInputError(f"group {group!r}: {item!r} is not a relation id or name")
    if r < 0 or (labels is not None and r >= len(labels)):
        raise InvalidInputError(f"group {group!r}: relation id {r} is out of range"
                                + (f" (0..{len(labels) - 1})" if labels is not None else ""))
    return r


def _user_groups(table: RankTable, groups: Mapping, data: GroupingData) -> Grouping:
    rel = _relations(table)
    if not groups:
        raise InvalidInputError("by: the mapping of group names to relations is empty")
    labels = data.relation_labels
    lookup = {str(lab): i for i, lab in enumerate(labels or ())}
    owner: dict[int, str] = {}
    members: dict[str, tuple[int, ...]] = {}
    for name, items in groups.items():
        name = str(name)
        if name == OTHER:
            raise InvalidInputError(f"group name {OTHER!r} is reserved for the relations no group names")
        if isinstance(items, (str, int, np.integer)):
            items = [items]  # one relation, not the characters of its name
        if not isinstance(items, (Sequence, set, frozenset, np.ndarray)) or len(items) == 0:
            raise InvalidInputError(f"group {name!r}: give a non-empty list of relations")
        ids = []
        for item in items:
            r = _resolve(item, labels, lookup, name)
            if r in owner and owner[r] != name:
                raise InvalidInputError(f"relation {_relation_name(labels, r)!r} is in two groups: {owner[r]!r} "
                                        f"and {name!r}")
            owner[r] = name
            ids.append(r)
        members[name] = tuple(sorted(set(ids)))
    names = list(members)
    code_of = np.full(max(int(rel.max()), max(owner)) + 1, len(names), dtype=np.int64)  # len(names): other
    for r, g in owner.items():
        code_of[r] = names.index(g)
    codes = code_of[rel]
    if np.any(codes == len(names)):
        names.append(OTHER)
        members[OTHER] = tuple(sorted(set(np.unique(rel).tolist()) - set(owner)))
    return Grouping("groups", tuple(names), codes, f"named relation groups; '{OTHER}': every other relation",
                    members)
