"""Evaluation triples whose entity or relation never occurs in training, counted the one way every
interface reports them (:class:`kgeval.protocol.Unseen`).

Such a triple is ranked with an embedding that training never updated: its rank says nothing about
the model. PyKEEN drops them when it maps the test split with the training vocabulary; kgeval keeps
them by default (numbers stay comparable with earlier kgeval runs) and always says how many there
are; ``drop_unseen=True`` drops them. An entity counts as seen when it is the head or the tail of a
training triple; a relation when it labels one.

Labels are compared exactly, never Unicode-normalised: a label is an identifier, and normalising
could merge two distinct ones. A label that differs from another only in its Unicode normal form
(``"e\\u0301"`` (NFD) beside ``"\\u00e9"`` (NFC)) is a *twin*: both are kept as distinct, and the
twins are counted (:func:`unicode_twins`) so that the report names them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping

import numpy as np

from ..errors import InvalidInputError
from ..protocol import Unseen
from ..triples import as_triples

__all__ = ["unseen_mask", "count_unseen", "unicode_twins", "training_triples_of"]

#: names of a ``filter_triples`` set read as the training triples
TRAINING_NAMES = ("train", "training")


def unseen_mask(training: np.ndarray, triples: np.ndarray) -> np.ndarray:
    """Which evaluation triples have an entity or relation that training never has.

    Parameters
    ----------
    training, triples : numpy.ndarray
        ``(m, 3)`` and ``(n, 3)`` int64 id triples ``(head, relation, tail)``.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` bool: ``h ∉ E_train or t ∉ E_train or r ∉ R_train``, where ``E_train`` holds the
        heads and tails of ``training`` and ``R_train`` its relations.

    Examples
    --------
    >>> unseen_mask(np.array([[0, 0, 1]]), np.array([[1, 0, 0], [0, 1, 1], [2, 0, 1]])).tolist()
    [False, True, True]
    """
    if len(triples) == 0:
        return np.zeros(0, dtype=bool)
    ents = np.unique(training[:, [0, 2]]) if len(training) else np.zeros(0, np.int64)
    rels = np.unique(training[:, 1]) if len(training) else np.zeros(0, np.int64)
    return ~(np.isin(triples[:, 0], ents) & np.isin(triples[:, 2], ents) & np.isin(triples[:, 1], rels))


def count_unseen(training, triples, *, policy: str = "kept", reference: str = "train", twins: int | None = None) -> Unseen:
    """The :class:`~kgeval.protocol.Unseen` record of ``triples`` against ``training``.

    Parameters
    ----------
    training, triples : array-like
        ``(m, 3)`` / ``(n, 3)`` integer id triples.
    policy : str
        ``"kept"`` (ranked) or ``"dropped"`` (removed before the evaluation).
    reference : str
        The name of the training set, as reports print it.
    twins : int or None
        Groups of labels equal up to Unicode normalisation (:func:`unicode_twins`), None if unknown.

    Returns
    -------
    Unseen
        ``triples``: rows of :func:`unseen_mask`; ``entities`` / ``relations``: distinct ids among
        those rows that training lacks.

    Examples
    --------
    >>> import numpy as np
    >>> u = count_unseen(np.array([[0, 0, 1]]), np.array([[0, 0, 1], [0, 0, 2], [3, 1, 1]]))
    >>> (u.triples, u.entities, u.relations)
    (2, 2, 1)
    """
    training = as_triples("training triples", training, allow_empty=True)
    triples = as_triples("triples", triples, allow_empty=True)
    mask = unseen_mask(training, triples)
    bad = triples[mask]
    ents = np.unique(training[:, [0, 2]]) if len(training) else np.zeros(0, np.int64)
    rels = np.unique(training[:, 1]) if len(training) else np.zeros(0, np.int64)
    return Unseen(policy=policy, triples=int(mask.sum()),
                  entities=int(np.setdiff1d(bad[:, [0, 2]], ents).size),
                  relations=int(np.setdiff1d(bad[:, 1], rels).size), reference=reference, twins=twins)


def training_triples_of(filter_triples) -> tuple[str, object] | None:
    """``(name, array)`` of the set named ``train`` / ``training`` in a ``filter_triples`` mapping or in
    a :class:`~kgeval.evaluation.KnownTriples` (its ``sets``: ``(name, array)`` pairs), or None."""
    if isinstance(filter_triples, Mapping):
        for name in TRAINING_NAMES:
            if name in filter_triples:
                return name, filter_triples[name]
    sets = getattr(filter_triples, "sets", None)  # duck-typed: data sits below evaluation
    if isinstance(sets, (list, tuple)):
        named = dict(pair for pair in sets if isinstance(pair, tuple) and len(pair) == 2)
        for name in TRAINING_NAMES:
            if name in named:
                return name, named[name]
    return None


def unicode_twins(labels: Iterable[str]) -> list[tuple[str, ...]]:
    """Groups of distinct labels with the same NFC normal form.

    Parameters
    ----------
    labels : iterable of str
        Entity or relation labels.

    Returns
    -------
    list of tuple of str
        Each group sorted, the groups sorted; labels alone in their normal form are left out.

    Examples
    --------
    >>> unicode_twins(["caf\\u00e9", "cafe\\u0301", "tea"])
    [('cafe\\u0301', 'café')]
    """
    groups: dict[str, set[str]] = {}
    for label in labels:
        if not isinstance(label, str):
            raise InvalidInputError(f"labels must be strings, got {type(label).__name__}")
        groups.setdefault(unicodedata.normalize("NFC", label), set()).add(label)
    return sorted(tuple(sorted(g)) for g in groups.values() if len(g) > 1)


def for_evaluation(triples, filter_triples, train_triples=None, drop_unseen: bool = False):
    """``(triples to evaluate, Unseen record or None)`` for :func:`kgeval.evaluate`.

    The training triples are ``train_triples``, else the ``filter_triples`` set named ``train`` /
    ``training``; without either nothing is counted (None) and ``drop_unseen=True`` is an error.
    Triples that are not id arrays (labels a scorer maps itself) are not counted either.
    """
    if not isinstance(drop_unseen, (bool, np.bool_)):
        raise InvalidInputError(f"drop_unseen must be True or False, got {drop_unseen!r}")
    reference = "train_triples"
    if train_triples is None:
        found = training_triples_of(filter_triples)
        if found is None:
            if drop_unseen:
                raise InvalidInputError("drop_unseen=True needs the training triples: pass train_triples=, or "
                                        "filter_triples={'train': ...}")
            return triples, None
        reference, train_triples = found
    try:
        tri = as_triples("triples", triples, allow_empty=False)
    except InvalidInputError:
        if drop_unseen:
            raise
        return triples, None  # the evaluation itself names the problem (or maps labels first)
    train = as_triples(reference, train_triples, allow_empty=True)
    mask = unseen_mask(train, tri)
    record = count_unseen(train, tri[mask], policy="dropped" if drop_unseen else "kept", reference=reference)
    if not drop_unseen:
        return triples, record
    if mask.all():
        raise InvalidInputError(f"drop_unseen=True drops all {len(tri)} evaluation triples: each has an entity or "
                                f"relation unseen in {reference}")
    return tri[~mask], record
