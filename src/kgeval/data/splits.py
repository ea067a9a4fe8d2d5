"""Split names: one vocabulary.

The canonical names are ``train``, ``valid`` and ``test`` (the file names of every benchmark
release). ``training``/``validation``/``testing`` (PyKEEN's words), ``dev`` and ``val`` are
accepted everywhere a split is named, through :func:`canonical_split` alone.

:class:`~kgeval.data.Dataset` keeps PyKEEN's attribute names (``ds.training``, ...), which are
also the keys of :meth:`~kgeval.data.Dataset.hashes` and of saved run configurations:
:data:`ATTRIBUTES` maps a canonical name to them.
"""

from __future__ import annotations

from ..errors import InvalidInputError

#: Canonical split names, in file order.
SPLITS = ("train", "valid", "test")
#: Canonical name -> Dataset attribute (and hashes/summary key).
ATTRIBUTES = {"train": "training", "valid": "validation", "test": "testing"}
#: Canonical name -> accepted file name stems, first = canonical.
FILE_STEMS = {"train": ("train", "training"), "valid": ("valid", "validation", "dev"), "test": ("test", "testing")}

_ALIASES = {stem: split for split, stems in FILE_STEMS.items() for stem in stems}
_ALIASES["val"] = "valid"


def canonical_split(name) -> str:
    """``train``/``valid``/``test`` for any accepted spelling (case and surrounding space ignored)."""
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in _ALIASES:
        raise InvalidInputError(
            f"unknown split {name!r}; use one of: train, valid, test (or training, validation, testing)"
        )
    return _ALIASES[key]


def split_attribute(name) -> str:
    """The :class:`~kgeval.data.Dataset` attribute holding a split (``'test'`` -> ``'testing'``)."""
    return ATTRIBUTES[canonical_split(name)]
