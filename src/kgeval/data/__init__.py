"""Datasets: labeled triples with label <-> id maps.

>>> from kgeval.data import get_dataset
>>> ds = get_dataset("nations")
>>> ds.num_entities, ds.num_relations, len(ds.training)
(14, 55, 1592)

Nations, Kinships and UMLS ship with the package. FB15k-237, WN18RR, WN18, CoDEx-S and
CoDEx-M are read from a data directory (``KGEVAL_DATA``, else ``~/.kgeval/datasets``)
laid out as ``<dir>/<Name>/{train,valid,test}.txt`` and checked against their published
sizes and sha256 hashes. Any other directory of ``train``/``valid``/``test`` files loads
by path.
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

from ..errors import InvalidInputError, unknown_name
from . import io
from .splits import ATTRIBUTES, FILE_STEMS, SPLITS, canonical_split
from .dataset import Dataset, map_triples
from .registry import DATASETS, ENV_VAR, DatasetInfo, data_dirs, dataset_names, locate, lookup
from .type_files import read_entity_types, read_type_constraints
from .types import CandidateSets, EntityTypes

__all__ = [
    "Dataset",
    "DatasetInfo",
    "DATASETS",
    "get_dataset",
    "dataset_names",
    "dataset_available",
    "map_triples",
    "data_dirs",
    "canonical_split",
    "SPLITS",
    "CandidateSets",
    "EntityTypes",
    "read_type_constraints",
    "read_entity_types",
]


def _builtin_dir(info: DatasetInfo):
    return importlib.resources.files("kgeval.data").joinpath("builtin", info.builtin)


def _load_registered(info: DatasetInfo, data_dir, drop_unseen: bool) -> Dataset:
    labels, hashes = {}, {}
    if info.builtin:
        root = _builtin_dir(info)
        source = f"kgeval builtin {info.name}"
        for split in SPLITS:
            data = root.joinpath(f"{split}.txt").read_bytes()
            hashes[ATTRIBUTES[split]] = io.sha256_of(data)
            labels[split] = io.parse_triples(data, source=f"{info.name}/{split}.txt")
    else:
        dirs = data_dirs(data_dir)
        directory = locate(info, dirs)
        files = {split: io.find_split_file(directory, split) if directory else None for split in SPLITS}
        missing = [FILE_STEMS[s][0] + ".txt" for s, f in files.items() if f is None]
        if missing:
            where = directory if directory else dirs[0] / info.name
            raise InvalidInputError(
                f"dataset {info.name} not found: place {', '.join(missing)} (tab-separated head, relation, tail; "
                f"from {info.source}) in {where}/. Searched: {', '.join(str(d) for d in dirs)}. "
                f"Set the {ENV_VAR} environment variable (a {os.pathsep}-separated list of directories) "
                f"or pass data_dir= to look elsewhere."
            )
        source = str(directory)
        for split, f in files.items():
            data = io.read_bytes(f)
            key = ATTRIBUTES[split]
            hashes[key] = io.sha256_of(data)
            if hashes[key] != info.sha256[key]:
                raise InvalidInputError(
                    f"dataset {info.name}: {f} has sha256 {hashes[key]}, expected {info.sha256[key]} "
                    f"(the canonical file from {info.source}); replace it with the canonical file"
                )
            labels[split] = io.parse_triples(data, source=str(f))
    # the hash already pins the content; the size check guards the registry itself and the parser
    for split in SPLITS:
        expected = info.sizes[ATTRIBUTES[split]]
        if len(labels[split]) != expected:
            raise InvalidInputError(f"dataset {info.name}: {split} has {len(labels[split])} triples, expected {expected}")
    ds = Dataset.from_labeled_arrays(
        labels["train"], labels["valid"], labels["test"],
        name=info.name, drop_unseen=drop_unseen, hashes=hashes, source=source, reference=info.name,
    )
    if not drop_unseen and (ds.num_entities, ds.num_relations) != (info.num_entities, info.num_relations):
        raise InvalidInputError(
            f"dataset {info.name}: {ds.num_entities} entities / {ds.num_relations} relations, "
            f"expected {info.num_entities} / {info.num_relations}"
        )
    return ds


def get_dataset(name_or_path, *, data_dir=None, drop_unseen: bool = False) -> Dataset:
    """Load a dataset by name (``nations``, ``fb15k-237``, ...; any case, ``-``/``_`` ignored) or directory path.

    A :class:`Dataset` passes through unchanged (``drop_unseen=True`` only for one built with it).
    Unknown names raise :class:`~kgeval.errors.UnknownNameError` suggesting the closest;
    missing or corrupt files raise :class:`~kgeval.errors.InvalidInputError`.

    Examples
    --------
    >>> from kgeval.data import get_dataset
    >>> ds = get_dataset("nations")
    >>> ds.num_entities, ds.num_relations, len(ds.testing)
    (14, 55, 201)
    """
    if isinstance(name_or_path, Dataset):
        if drop_unseen and not name_or_path.dropped:
            raise InvalidInputError("drop_unseen=True needs a dataset name or path, or a Dataset built with "
                                    "drop_unseen=True, not a Dataset object that kept unseen entities")
        return name_or_path
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise InvalidInputError(f"dataset must be a name, a directory path or a Dataset, got {type(name_or_path).__name__}")
    if not str(name_or_path).strip():  # Path("") is ".": an empty name would load the working directory
        raise InvalidInputError(f"dataset name is empty ({str(name_or_path)!r}); give a name or a directory path")
    info = lookup(str(name_or_path))
    if info is not None:
        return _load_registered(info, data_dir, drop_unseen)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return Dataset.from_directory(path, drop_unseen=drop_unseen)
    text = str(name_or_path)
    if os.sep in text or (os.altsep and os.altsep in text) or text.startswith("."):
        what = "is a file, not a directory of train/valid/test files" if path.exists() else "does not exist"
        raise InvalidInputError(f"dataset directory {path} {what}")
    raise unknown_name("dataset", text, dataset_names())


def dataset_available(name: str, *, data_dir=None) -> bool:
    """Whether a registered dataset can be loaded (packaged, or all split files present in a data directory)."""
    info = lookup(name)
    if info is None:
        return False
    if info.builtin:
        return True
    directory = locate(info, data_dirs(data_dir))
    try:
        return directory is not None and all(io.find_split_file(directory, s) for s in SPLITS)
    except InvalidInputError:  # conflicting split files: present, but not loadable as it stands
        return False
