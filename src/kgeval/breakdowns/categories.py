"""Relation categories (Bordes et al., 2013), entity degrees and their quantile buckets, from id triples
(numpy; memory linear in the triples: sorting, no relation x entity table). See :mod:`kgeval.breakdowns`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validation import check_positive_int, check_positive_number
from ..errors import InvalidInputError
from ..triples import as_triples

__all__ = ["CATEGORIES", "UNSEEN", "RelationCategories", "relation_categories", "entity_degrees", "degree_buckets"]

#: the relation categories, head side first
CATEGORIES = ("1-1", "1-N", "N-1", "N-N")
#: the category of a relation with no triple in the counted splits
UNSEEN = "unseen"


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
