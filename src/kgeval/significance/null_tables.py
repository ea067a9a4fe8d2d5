"""Shipped null-model tables: the §4.2 database of Hoyt, Berrendorf et al. (2022) of expectations and variances.

One gzip JSON per registered dataset, ``kgeval/data/null_models/<name>.json.gz``, written by
``scripts/build_null_models.py`` from the dataset files::

    {"format": 1, "dataset": "FB15k-237", "kgeval_version": "...", "identity": {sha256, sizes, ...},
     "protocols": {"test/filtered:train+valid+test/keep_unseen": {
         "protocol": {...}, "num_entities": 14541,
         "candidates": {"head": [[C, #tasks], ...], "tail": [...]},
         "moments": {"both": {"inverse_harmonic_mean_rank": [E, Var, exact, opt − E], ...},
                     "head": ..., "tail": ...}}}}

(``opt − E``: :attr:`~kgeval.metrics.NullMoments.optimum_gap`, null where not stated; rows of three, as
written before it existed, still load.)

The candidate histograms make exact null distributions (p-values) possible without the files;
the moments are those :class:`~kgeval.significance.null_model.NullModel` computes from them.
This module reads and writes the files; building a table and a :class:`NullModel` from one is
:mod:`.null_model` (:func:`~.null_model.build_table`, :func:`~.null_model.load_shipped`).
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
from functools import lru_cache
from pathlib import Path

from ..data.registry import normalize_name
from .candidates import NullProtocol

FORMAT = 1
#: the package directory of the tables
PACKAGE_DIR = ("kgeval.data", "null_models")


def shipped_protocols() -> list[NullProtocol]:
    """Every protocol a table holds: valid/test x filtered/unfiltered (test filtered with and
    without validation) x keep/drop unseen."""
    out = []
    for drop in (False, True):
        out += [NullProtocol("valid", True, True, drop), NullProtocol("valid", False, True, drop),
                NullProtocol("test", True, True, drop), NullProtocol("test", True, False, drop),
                NullProtocol("test", False, True, drop)]
    return out


def table_file_name(name: str) -> str:
    return f"{normalize_name(name)}.json.gz"


def write_table(table: dict, path: str | Path) -> int:
    """Write ``table`` as gzip JSON (mtime 0: the same table gives the same bytes); returns the size."""
    data = json.dumps(table, separators=(",", ":"), sort_keys=True).encode("utf-8")
    blob = gzip.compress(data, compresslevel=9, mtime=0)
    Path(path).write_bytes(blob)
    return len(blob)


@lru_cache(maxsize=None)
def read_shipped(name: str) -> dict | None:
    """The shipped table of registered dataset ``name`` (canonical name), or None."""
    res = importlib.resources.files(PACKAGE_DIR[0]).joinpath(PACKAGE_DIR[1], table_file_name(name))
    if not res.is_file():
        return None
    from .._json import parse_json

    return parse_json(gzip.decompress(res.read_bytes()), str(res), "a kgeval null-model table")

