"""The :class:`Dataset`: three splits of id triples plus the label <-> id maps.

Ids are positions in the sorted label lists (entities and relations separately), so
the same files always give the same ids, whatever order the triples come in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import check_nonnegative_int
from ..errors import InvalidInputError
from ..triples import as_triples, check_ids
from . import io
from .splits import ATTRIBUTES, FILE_STEMS, SPLITS, split_attribute


#: The most entities (or relations) :meth:`Dataset.from_id_arrays` labels: one Python string per id.
MAX_IDS = 2**31 - 1

#: DataFrame column names of (head, relation, tail), tried in this order.
_COLUMN_NAMES = (("head", "relation", "tail"), ("head_label", "relation_label", "tail_label"),
                 ("head", "rel", "tail"), ("subject", "predicate", "object"), ("source", "relation", "target"))


def _as_label_array(name: str, triples: Any) -> np.ndarray:
    """Coerce labeled triples (array, list of tuples, DataFrame) to an ``(n, 3)`` object array of ``str``."""
    if triples is None:
        return np.empty((0, 3), dtype=object)
    if hasattr(triples, "columns") and hasattr(triples, "iloc"):  # pandas DataFrame
        # named columns first, in any order and case (PyKEEN's to_df: head_id, head_label, ...: the labels;
        # networkx's edge lists: source, target, relation); else exactly three columns, in head, relation,
        # tail order: the first three of more were taken silently (an index column became the heads)
        lower = {c.lower(): c for c in triples.columns if isinstance(c, str)}
        for names in _COLUMN_NAMES:
            if all(c in lower for c in names):
                frame = triples[[lower[c] for c in names]]
                break
        else:
            if triples.shape[1] != 3:
                raise InvalidInputError(
                    f"{name}: a DataFrame of triples needs columns head, relation, tail (or head_label, "
                    f"relation_label, tail_label; subject, predicate, object; source, relation, target), or "
                    f"exactly 3 columns; got {triples.shape[1]}: {[str(c) for c in triples.columns][:8]}"
                )
            frame = triples
        if frame.isna().to_numpy().any():
            bad = int(np.flatnonzero(frame.isna().to_numpy().any(axis=1))[0])
            raise InvalidInputError(f"{name}: row {bad} has a missing label")
        # astype(str) keeps string labels verbatim; numeric columns have already lost any leading zeros
        triples = frame.astype(str).to_numpy(dtype=object)
    arr = np.asarray(triples, dtype=object)
    if arr.size == 0:
        return np.empty((0, 3), dtype=object)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise InvalidInputError(f"{name}: labeled triples must have shape (n, 3), got {arr.shape}")
    if not all(type(v) is str for v in arr.ravel()):  # noqa: E721 - exact str, as parse_triples gives
        raw = next((v for v in arr.ravel() if isinstance(v, (bytes, bytearray))), None)
        if raw is not None:  # str(b"x") is "b'x'": a silent new label
            raise InvalidInputError(f"{name}: labels must be text, got bytes {raw[:40]!r}; decode them first")
        missing = next((i for i, v in enumerate(arr.ravel()) if _is_missing(v)), None)
        if missing is not None:  # str(nan) is "nan", str(pd.NA) "<NA>": a silent new entity
            i = missing // 3
            raise InvalidInputError(f"{name}: triple {i} has a missing label: {list(arr[i])!r}")
        arr = np.vectorize(lambda v: v if v is None else str(v), otypes=[object])(arr)
    empty = np.fromiter((v is None or not v.strip() for v in arr.ravel()), dtype=bool, count=arr.size)
    if empty.any():
        i = int(np.flatnonzero(empty)[0]) // 3
        raise InvalidInputError(f"{name}: triple {i} has an empty or missing label: {list(arr[i])!r}")
    # the triple-file parser's rule: surrounding whitespace is no part of a label, so the same labelled
    # triple gets the same ids from a file, an array or a DataFrame ("a " would be another entity)
    if any(v != v.strip() for v in arr.ravel()):
        arr = np.vectorize(str.strip, otypes=[object])(arr)
    if tuple(v.lower() for v in arr[0]) in io.HEADERS:  # a file's header read as data (header=None)
        raise InvalidInputError(f"{name}: triple 0 {list(arr[0])!r} is a column header, not a triple: drop it")
    _check_writable(name, arr)
    return arr


def _is_missing(v) -> bool:
    """A missing value as pandas and numpy spell it: a float NaN, ``pd.NA``, ``pd.NaT``."""
    if isinstance(v, (float, np.floating)):
        return bool(np.isnan(v))
    return type(v).__name__ in ("NAType", "NaTType")


def _check_writable(name: str, arr: np.ndarray) -> None:
    """Labels must survive the TSV form that hashes and saved runs use: no tab or line break
    (it would split the label), no NUL (the readers refuse it), no lone surrogate (not UTF-8)."""
    joined = "\t".join(arr.ravel())
    bad = next((c for c in "\n\r\x00" if c in joined), None)
    if bad is None and joined.count("\t") != arr.size - 1:
        bad = "\t"
    if bad is None:
        try:
            joined.encode("utf-8")
            return
        except UnicodeEncodeError as exc:
            bad = joined[exc.start]
    i = next(k for k, v in enumerate(arr.ravel()) if bad in v) // 3
    raise InvalidInputError(f"{name}: triple {i} has a label with {bad!r}, which a triple file cannot hold: {list(arr[i])!r}")


def _ids(mapping: dict[str, int], column: np.ndarray) -> np.ndarray:
    return np.fromiter((mapping[x] for x in column), dtype=np.int64, count=len(column))


class Dataset:
    """A link-prediction dataset: training / validation / testing id triples and label maps.

    Build one with :func:`kgeval.data.get_dataset` or the ``from_*`` constructors.
    Triples are int64 arrays of shape ``(n, 3)`` holding ``(head, relation, tail)`` ids.
    """

    def __init__(
        self,
        *,
        name: str,
        training: np.ndarray,
        validation: np.ndarray,
        testing: np.ndarray,
        entity_labels: Sequence[str],
        relation_labels: Sequence[str],
        hashes: Mapping[str, str] | None = None,
        source: str | None = None,
        dropped: Mapping[str, Mapping[str, int]] | None = None,
        reference: str | None = None,
    ):
        self.name = name
        self.entity_labels: list[str] = list(entity_labels)
        self.relation_labels: list[str] = list(relation_labels)
        self.entity_to_id: dict[str, int] = {label: i for i, label in enumerate(self.entity_labels)}
        self.relation_to_id: dict[str, int] = {label: i for i, label in enumerate(self.relation_labels)}
        for kind, labels, mapping in (("entity", self.entity_labels, self.entity_to_id),
                                      ("relation", self.relation_labels, self.relation_to_id)):
            if len(mapping) != len(labels):  # two ids for one label: label -> id would pick one silently
                dup = next(x for i, x in enumerate(labels) if mapping[x] != i)
                raise InvalidInputError(f"{kind} label {dup!r} appears twice in {kind}_labels")
        self.training = self._check_ids("training", training)
        self.validation = self._check_ids("validation", validation)
        self.testing = self._check_ids("testing", testing)
        self._hashes = dict(hashes) if hashes else None
        self.source = source
        #: what :func:`kgeval.data.get_dataset` needs to load this dataset again (canonical name or
        #: absolute directory path); None for in-memory datasets
        self.reference: str | None = reference
        self.dropped = {k: dict(v) for k, v in (dropped or {}).items()}
        self._twins: int | None = None

    # ------------------------------------------------------------------ basics
    @property
    def num_entities(self) -> int:
        return len(self.entity_labels)

    @property
    def num_relations(self) -> int:
        return len(self.relation_labels)

    def _check_ids(self, split: str, triples) -> np.ndarray:
        arr = as_triples(split, triples, allow_empty=True)
        check_ids(split, arr, self.num_entities, self.num_relations)
        return arr

    def split(self, name: str) -> np.ndarray:
        """The id triples of ``train``/``valid``/``test`` (or ``training``/``validation``/``testing``)."""
        return getattr(self, split_attribute(name))

    def hashes(self) -> dict[str, str]:
        """sha256 per split: of the source file's (decompressed) bytes, or of the canonical TSV for in-memory data."""
        if self._hashes is None:
            self._hashes = {
                key: io.sha256_of(io.serialize_triples(self.to_labels(getattr(self, key)))) for key in ATTRIBUTES.values()
            }
        return dict(self._hashes)

    def to_labels(self, triples: np.ndarray) -> np.ndarray:
        """Map id triples back to an ``(n, 3)`` array of labels.

        Ids are checked like every id triple: a float is refused (never truncated), and a negative
        or too large id is an :class:`~kgeval.errors.InvalidInputError` (never numpy's wrap-around).
        """
        triples = as_triples("triples", triples, allow_empty=True)
        if triples.size == 0:
            return np.empty((0, 3), dtype=object)
        check_ids("triples", triples, self.num_entities, self.num_relations)
        ent = np.asarray(self.entity_labels, dtype=object)
        rel = np.asarray(self.relation_labels, dtype=object)
        return np.stack([ent[triples[:, 0]], rel[triples[:, 1]], ent[triples[:, 2]]], axis=1)

    def summary(self) -> dict[str, Any]:
        """Statistics: sizes, and per evaluation split how many triples/entities/relations are unseen in training."""
        seen_e = np.zeros(self.num_entities, dtype=bool)
        seen_r = np.zeros(self.num_relations, dtype=bool)
        if len(self.training):
            seen_e[self.training[:, [0, 2]].ravel()] = True
            seen_r[self.training[:, 1]] = True
        out: dict[str, Any] = {
            "name": self.name,
            "num_entities": self.num_entities,
            "num_relations": self.num_relations,
            "num_training": int(len(self.training)),
            "num_validation": int(len(self.validation)),
            "num_testing": int(len(self.testing)),
            "num_entities_in_training": int(seen_e.sum()),
        }
        for split in ("validation", "testing"):
            tr = getattr(self, split)
            if len(tr):
                unseen_ent = ~seen_e[tr[:, 0]] | ~seen_e[tr[:, 2]]
                unseen_rel = ~seen_r[tr[:, 1]]
                ents = np.setdiff1d(tr[:, [0, 2]].ravel(), np.flatnonzero(seen_e))
                out[f"unseen_{split}"] = {
                    "triples": int((unseen_ent | unseen_rel).sum()),
                    "entities": int(ents.size),
                    "relations": int(np.setdiff1d(tr[:, 1], np.flatnonzero(seen_r)).size),
                }
            else:
                out[f"unseen_{split}"] = {"triples": 0, "entities": 0, "relations": 0}
        if self.dropped:
            out["dropped_unseen"] = {k: dict(v) for k, v in self.dropped.items()}
        if self.source:
            out["source"] = self.source
        return out

    def unseen(self, split: str, *, drop: bool = False):
        """The :class:`~kgeval.protocol.Unseen` record of an evaluation split against ``training``.

        A dataset loaded with ``drop_unseen=True`` has already dropped them (policy ``"dropped"``, the
        counts of :attr:`dropped`); otherwise they are counted in the split, ``"dropped"`` when the
        evaluation drops them (``drop=True``), else ``"kept"``. ``twins``: groups of labels equal up to
        Unicode normalisation (:func:`kgeval.data.unseen.unicode_twins`).
        """
        from ..protocol import Unseen
        from .unseen import count_unseen, unicode_twins

        if self._twins is None:  # labels never change: counted once
            self._twins = len(unicode_twins(self.entity_labels)) + len(unicode_twins(self.relation_labels))
        attr = split_attribute(split)
        if attr in self.dropped:
            d = self.dropped[attr]
            return Unseen("dropped", d["triples"], d["entities"], d["relations"], "training", self._twins)
        return count_unseen(self.training, self.split(split), policy="dropped" if drop else "kept",
                            reference="training", twins=self._twins)

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}, entities={self.num_entities}, relations={self.num_relations}, "
            f"train={len(self.training)}, valid={len(self.validation)}, test={len(self.testing)})"
        )

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_labeled_arrays(
        cls,
        training,
        validation=None,
        testing=None,
        *,
        name: str = "custom",
        drop_unseen: bool = False,
        hashes: Mapping[str, str] | None = None,
        source: str | None = None,
        reference: str | None = None,
    ) -> Dataset:
        """Build from ``(n, 3)`` arrays (or lists of tuples) of string labels.

        Labels are read as the triple-file parser reads them: surrounding whitespace is dropped.

        The entity/relation vocabularies are those of all splits, sorted; with
        ``drop_unseen=True`` they come from training only, and evaluation triples with
        an entity or relation not seen in training are dropped (PyKEEN's behaviour;
        the counts are reported in :meth:`summary` under ``dropped_unseen``).
        """
        labels = {
            "training": _as_label_array("training", training),
            "validation": _as_label_array("validation", validation),
            "testing": _as_label_array("testing", testing),
        }
        dropped: dict[str, dict[str, int]] = {}
        tr = labels["training"]
        if drop_unseen:
            # PyKEEN's behaviour: vocabularies from training; evaluation triples outside them are dropped
            ent_set = set(tr[:, 0]) | set(tr[:, 2])
            rel_set = set(tr[:, 1])
            for split in ("validation", "testing"):
                arr = labels[split]
                keep = np.fromiter(
                    (h in ent_set and r in rel_set and t in ent_set for h, r, t in arr), dtype=bool, count=len(arr)
                )
                dropped[split] = {
                    "triples": int((~keep).sum()),
                    "entities": len((set(arr[:, 0]) | set(arr[:, 2])) - ent_set),
                    "relations": len(set(arr[:, 1]) - rel_set),
                }
                labels[split] = arr[keep]
        else:
            ent_set, rel_set = set(), set()
            for arr in labels.values():
                ent_set.update(arr[:, 0], arr[:, 2])
                rel_set.update(arr[:, 1])
        entity_labels, relation_labels = sorted(ent_set), sorted(rel_set)
        e2i = {label: i for i, label in enumerate(entity_labels)}
        r2i = {label: i for i, label in enumerate(relation_labels)}

        def to_ids(arr: np.ndarray) -> np.ndarray:
            if not len(arr):
                return np.empty((0, 3), dtype=np.int64)
            return np.stack([_ids(e2i, arr[:, 0]), _ids(r2i, arr[:, 1]), _ids(e2i, arr[:, 2])], axis=1)

        return cls(
            name=name,
            training=to_ids(labels["training"]),
            validation=to_ids(labels["validation"]),
            testing=to_ids(labels["testing"]),
            entity_labels=entity_labels,
            relation_labels=relation_labels,
            hashes=hashes,
            source=source,
            dropped=dropped if drop_unseen else None,
            reference=reference,
        )

    @classmethod
    def from_dataframes(cls, training, validation=None, testing=None, *, name: str = "custom", drop_unseen: bool = False) -> Dataset:
        """Build from pandas DataFrames with columns ``head, relation, tail`` in any order (else ``head_label,
        relation_label, tail_label`` as PyKEEN's ``to_df`` writes, ``subject, predicate, object`` or
        ``source, relation, target``; else exactly three columns, taken as head, relation, tail).

        Read files with ``dtype=str`` (``pd.read_csv(..., sep="\\t", header=None, dtype=str)``):
        a numeric column has already lost any leading zeros of its labels.
        """
        return cls.from_labeled_arrays(training, validation, testing, name=name, drop_unseen=drop_unseen)

    @classmethod
    def from_id_arrays(
        cls,
        training,
        validation=None,
        testing=None,
        *,
        num_entities: int | None = None,
        num_relations: int | None = None,
        name: str = "custom",
    ) -> Dataset:
        """Build from integer id triples (floats are refused, never truncated); labels are the ids as strings.

        ``num_entities``/``num_relations`` default to the largest id + 1.
        """
        arrs = [as_triples(split, a, allow_empty=True) if a is not None else np.empty((0, 3), np.int64)
                for split, a in zip(ATTRIBUTES.values(), (training, validation, testing))]
        allt = np.concatenate(arrs)
        ne = check_nonnegative_int("num_entities", num_entities, allow_none=True)
        nr = check_nonnegative_int("num_relations", num_relations, allow_none=True)
        if ne is None:
            ne = max(int(allt[:, [0, 2]].max()) + 1, 0) if len(allt) else 0
        if nr is None:
            nr = max(int(allt[:, 1].max()) + 1, 0) if len(allt) else 0
        for what, n in (("entities", ne), ("relations", nr)):
            # one label per id: 2**62 ids (a hashed id, an overflowed one) would be a bare MemoryError after minutes
            if n > MAX_IDS:
                raise InvalidInputError(
                    f"{n} {what} (ids must be dense, 0 to n - 1): more than {MAX_IDS} cannot be labelled in "
                    f"memory; map sparse or hashed ids to 0..n-1 first, or use from_labeled_arrays"
                )
        return cls(
            name=name,
            training=arrs[0],
            validation=arrs[1],
            testing=arrs[2],
            entity_labels=[str(i) for i in range(ne)],
            relation_labels=[str(i) for i in range(nr)],
        )

    @classmethod
    def from_directory(cls, path: str | os.PathLike, *, name: str | None = None, drop_unseen: bool = False) -> Dataset:
        """Load ``train``/``valid``/``test`` files (``.txt`` or ``.tsv``, optionally ``.gz``) from a directory.

        An empty (or blank) training file is refused; empty validation/test files give empty splits.
        """
        directory = Path(path).expanduser()
        if not directory.is_dir():
            raise InvalidInputError(f"dataset directory {directory} does not exist")
        files = {split: io.find_split_file(directory, split) for split in SPLITS}
        missing = [split for split, f in files.items() if f is None]
        if missing:
            wanted = ", ".join(f"{FILE_STEMS[s][0]}.txt" for s in missing)
            raise InvalidInputError(
                f"dataset directory {directory} lacks the {', '.join(ATTRIBUTES[s] for s in missing)} split: "
                f"expected {wanted} (tab-separated head, relation, tail; .tsv and .gz also accepted)"
            )
        labels, hashes = {}, {}
        for split, f in files.items():
            labels[split], hashes[ATTRIBUTES[split]] = io.read_triples(f)
        if not len(labels["train"]):
            raise InvalidInputError(f"{files['train']}: no triples (the training file is empty)")
        return cls.from_labeled_arrays(
            labels["train"], labels["valid"], labels["test"],
            name=name or Path(os.path.abspath(directory)).name, drop_unseen=drop_unseen, hashes=hashes, source=str(directory),
            reference=str(directory.absolute()),
        )


def map_triples(dataset: Dataset, label_triples, *, name: str = "triples") -> np.ndarray:
    """Map ``(n, 3)`` labeled triples to ids with ``dataset``'s maps; unknown labels raise InvalidInputError."""
    arr = _as_label_array(name, label_triples)
    out = np.empty(arr.shape, dtype=np.int64)
    maps = (dataset.entity_to_id, dataset.relation_to_id, dataset.entity_to_id)
    kinds = ("entity", "relation", "entity")
    for col in range(3):
        mapping = maps[col]
        for i, label in enumerate(arr[:, col]):
            try:
                out[i, col] = mapping[label]
            except KeyError:
                raise InvalidInputError(
                    f"{name}: row {i} has {kinds[col]} {label!r}, unknown in dataset {dataset.name!r}"
                ) from None
    return out
