"""Groups of ranking tasks for breakdowns, computed from id triples (numpy, memory linear in the triples).

- **relation categories** 1-1 / 1-N / N-1 / N-N (Bordes et al., 2013, "Translating Embeddings for Modeling
  Multi-relational Data"): per relation r, on the counted triples (the training split by default),
  ``tph`` = mean number of distinct tails per distinct (head, r) pair and ``hpt`` = mean number of distinct
  heads per distinct (r, tail) pair; a side is ``1`` when its mean is below the threshold (1.5), else
  ``N``; the head side comes first (1-N: hpt < 1.5 and tph >= 1.5, LibKGE's ``index_relation_types``). A
  relation without a counted triple is ``unseen``;
- **entity frequency**: the degree of the answer entity (``frequency``) or of the query entity
  (``query_frequency``) in the counted triples (the number of triples it occurs in, as head or tail; a
  self-loop once), in quantile buckets of the tasks (LibKGE's ``argument_frequency`` idea; LibKGE
  buckets entities and splits equal frequencies between buckets, here no degree is split);
- **relation groups** named by the user (the rest is ``other``) and **single relations**.

A :class:`Grouping` assigns each row of a rank table to one group; the statistics of a group are the
one machinery's on ``table.subset(grouping.mask(label))`` (:mod:`kgeval.results.breakdown`), so a group's
adjusted index and z-score use that group's own candidate counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ._validation import Side, check_positive_int, check_positive_number
from .errors import InvalidInputError, unknown_name
from .ranks import RankTable
from .triples import as_triples

__all__ = ["CATEGORIES", "UNSEEN", "OTHER", "GROUPINGS", "RelationCategories", "relation_categories",
           "entity_degrees", "degree_buckets", "Grouping", "GroupingData", "grouping_data", "group_tasks"]

#: the relation categories, head side first
CATEGORIES = ("1-1", "1-N", "N-1", "N-N")
#: the category of a relation with no triple in the counted splits
UNSEEN = "unseen"
#: the group of the relations no user group names
OTHER = "other"
#: the groupings :func:`group_tasks` knows (a mapping of group names to relations is the fifth)
GROUPINGS = ("category", "frequency", "query_frequency", "relation")
_SYNONYMS = {"category": "category", "categories": "category", "relation_category": "category",
             "relation_categories": "category", "frequency": "frequency", "answer_frequency": "frequency",
             "query_frequency": "query_frequency", "relation": "relation", "relations": "relation"}


@dataclass(frozen=True)
class RelationCategories:
    """The Bordes et al. (2013) category of every relation, with the means it comes from.

    ``tph[r]`` / ``hpt[r]``: mean distinct tails per (head, r) / heads per (r, tail) pair (NaN where r has no
    counted triple); ``threshold``: a side is ``1`` below it; ``counted_on``: the triples counted, in words.
    """

    tph: np.ndarray
    hpt: np.ndarray
    threshold: float = 1.5
    counted_on: str = "the training split"

    @property
    def categories(self) -> np.ndarray:
        """The category of every relation id (``1-1``, ``1-N``, ``N-1``, ``N-N`` or ``unseen``)."""
        head = np.where(self.hpt < self.threshold, "1", "N")
        tail = np.where(self.tph < self.threshold, "1", "N")
        out = np.char.add(np.char.add(head, "-"), tail).astype(object)
        out[np.isnan(self.tph)] = UNSEEN
        return out

    def category_of(self, relation: int) -> str:
        """The category of one relation id (``unseen`` beyond the counted relations)."""
        return str(self.categories[relation]) if 0 <= relation < len(self.tph) else UNSEEN

    def relations(self, category: str) -> list[int]:
        """The relation ids of one category."""
        return np.flatnonzero(self.categories == category).tolist()

    def rule(self) -> str:
        """The rule in words, printed with every category table."""
        t = f"{self.threshold:g}"
        return (f"relation categories (Bordes et al., 2013) counted on {self.counted_on}: tph = mean number of "
                f"distinct tails per (head, relation) pair, hpt = mean number of distinct heads per (relation, tail) "
                f"pair; a side is 1 when its mean is below {t}, else N, head side first: 1-N has hpt < {t} and "
                f"tph >= {t}; a relation without a counted triple is '{UNSEEN}'")

    def to_dict(self) -> dict:
        """``{"threshold", "counted_on", "relations": [{"relation", "tph", "hpt", "category"}]}`` (JSON-able)."""
        cats = self.categories
        return {"threshold": self.threshold, "counted_on": self.counted_on, "relations": [
            {"relation": r, "tph": None if math.isnan(self.tph[r]) else float(self.tph[r]),
             "hpt": None if math.isnan(self.hpt[r]) else float(self.hpt[r]), "category": str(cats[r])}
            for r in range(len(self.tph))]}


def _count_per_relation(relations: np.ndarray, num_relations: int) -> np.ndarray:
    return np.bincount(relations, minlength=num_relations).astype(np.float64)


def relation_categories(triples, *, num_relations: int | None = None, threshold: float = 1.5,
                        counted_on: str = "the training split") -> RelationCategories:
    """The 1-1 / 1-N / N-1 / N-N category of every relation (Bordes et al., 2013).

    Parameters
    ----------
    triples : array-like of shape (n, 3)
        The counted ``(head, relation, tail)`` id triples (the training split, by convention); a triple
        listed twice counts once.
    num_relations : int, optional
        The number of relation ids (default: the largest relation id + 1).
    threshold : float
        A side is ``1`` when its mean is below it, else ``N`` (default 1.5).
    counted_on : str
        The counted triples in words (for :meth:`RelationCategories.rule`).

    Returns
    -------
    RelationCategories
        ``tph``, ``hpt`` (NaN for a relation without a triple) and the categories.

    Notes
    -----
    With ``T_r`` the distinct triples of relation r: ``tph_r = |T_r| / |{(h, r) : (h, r, t) in T_r}|`` and
    ``hpt_r = |T_r| / |{(r, t) : (h, r, t) in T_r}|``; the category is ``"1" if hpt_r < threshold else "N"``,
    ``"-"``, ``"1" if tph_r < threshold else "N"``. Memory: O(n) (sorting, no dense relation x entity table).

    Examples
    --------
    >>> import numpy as np
    >>> cats = relation_categories(np.array([[0, 0, 1], [0, 0, 2], [3, 1, 4]]))
    >>> cats.categories.tolist(), cats.tph.tolist()
    (['1-N', '1-1'], [2.0, 1.0])
    """
    triples = as_triples("triples", triples)
    threshold = check_positive_number("threshold", threshold)
    if triples.min() < 0:
        raise InvalidInputError(f"triples: ids must be non-negative, got {int(triples.min())}")
    n = int(triples[:, 1].max()) + 1
    if num_relations is not None:
        num_relations = check_positive_int("num_relations", num_relations)
        if num_relations < n:
            raise InvalidInputError(f"triples hold relation id {n - 1}, but num_relations is {num_relations}")
        n = num_relations
    distinct = np.unique(triples, axis=0)
    count = _count_per_relation(distinct[:, 1], n)
    heads = _count_per_relation(np.unique(distinct[:, :2], axis=0)[:, 1], n)  # distinct (h, r) pairs per r
    tails = _count_per_relation(np.unique(distinct[:, 1:], axis=0)[:, 0], n)  # distinct (r, t) pairs per r
    with np.errstate(invalid="ignore", divide="ignore"):
        tph, hpt = count / heads, count / tails  # 0 / 0 = NaN: no triple
    return RelationCategories(tph, hpt, float(threshold), counted_on)


def entity_degrees(triples, num_entities: int | None = None) -> np.ndarray:
    """The number of ``triples`` every entity occurs in, as head or tail (a self-loop counts once).

    Examples
    --------
    >>> import numpy as np
    >>> entity_degrees(np.array([[0, 0, 1], [1, 0, 1], [2, 1, 0]])).tolist()
    [2, 2, 1]
    """
    triples = as_triples("triples", triples, allow_empty=True)
    n = int(triples[:, [0, 2]].max(initial=-1)) + 1
    n = n if num_entities is None else max(n, int(num_entities))
    h, t = triples[:, 0], triples[:, 2]
    loops = h[h == t]
    return np.bincount(h, minlength=n) + np.bincount(t, minlength=n) - np.bincount(loops, minlength=n)


def degree_buckets(degrees, quantiles: int = 4) -> tuple[np.ndarray, list[str]]:
    """Quantile buckets of per-task degrees: ``(codes, labels)``, bucket ``codes[i]`` for task i.

    The i-th cut (i = 1..q-1) is the ``i/q`` quantile of the degrees, ``c_i`` = the smallest degree d with
    at least ``i/q`` of the tasks at degree <= d; bucket i holds the degrees in ``(c_(i-1), c_i]``. Equal
    cuts merge, so tasks of one degree are never split (fewer buckets where degrees repeat). Labels
    ``degree a-b`` name the smallest and largest degree in the bucket.

    Examples
    --------
    >>> codes, labels = degree_buckets([0, 1, 1, 5, 9, 9, 9, 20], quantiles=4)
    >>> codes.tolist(), labels
    ([0, 0, 0, 1, 2, 2, 2, 3], ['degree 0-1', 'degree 5', 'degree 9', 'degree 20'])
    """
    quantiles = check_positive_int("quantiles", quantiles)
    d = np.asarray(degrees, dtype=np.int64)
    n = d.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    s = np.sort(d)
    # c_i = s[ceil(i n / q) - 1] in integers: float quantiles could put a cut one task off
    cuts = np.unique([s[(i * n + quantiles - 1) // quantiles - 1] for i in range(1, quantiles)] + [s[-1]])
    codes = np.searchsorted(cuts, d, side="left")  # the first cut >= d
    labels = []
    for i in range(cuts.size):
        members = d[codes == i]
        lo, hi = int(members.min()), int(members.max())
        labels.append(f"degree {lo}" if lo == hi else f"degree {lo}-{hi}")
    return codes.astype(np.int64), labels


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
