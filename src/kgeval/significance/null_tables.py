"""Shipped null-model tables: seed 004's §4.2 database of expectations and variances.

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
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
from functools import lru_cache
from pathlib import Path

from .candidates import SIDES, CandidateHistogram, NullProtocol
from .null_model import NullModel, from_dataset, tabulated_metrics

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
    from ..data.registry import normalize_name

    return f"{normalize_name(name)}.json.gz"


def build_table(name: str, data_dir=None) -> dict:
    """The table of registered dataset ``name`` from its files (keep- and drop-unseen loads)."""
    from .. import __version__
    from ..data import get_dataset

    loaded = {drop: get_dataset(name, data_dir=data_dir, drop_unseen=drop) for drop in (False, True)}
    full = from_dataset(loaded[False], NullProtocol())
    protocols = {}
    for protocol in shipped_protocols():
        model = from_dataset(loaded[protocol.drop_unseen], protocol)
        protocols[protocol.key] = {
            "protocol": protocol.to_dict(),
            "num_entities": model.num_entities,
            "candidates": {side: model.histograms[side].to_pairs() for side in ("head", "tail")},
            "moments": {side: {m.key: _moment_row(model.moments(f"{side}.{m.key}")) for m in tabulated_metrics()}
                        for side in SIDES},
        }
    return {"format": FORMAT, "dataset": loaded[False].name, "kgeval_version": __version__,
            "identity": full.identity, "protocols": protocols}


def _moment_row(m) -> list:
    return [m.mean, m.variance, m.exact, m.optimum_gap]


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


def load_shipped(name: str, protocol: NullProtocol) -> NullModel | None:
    """The :class:`NullModel` of ``protocol`` from the shipped table of ``name``, or None."""
    table = read_shipped(name)
    if table is None or protocol.key not in table["protocols"]:
        return None
    entry = table["protocols"][protocol.key]
    hist = {side: CandidateHistogram.from_pairs(pairs) for side, pairs in entry["candidates"].items()}
    hist["both"] = hist["head"] + hist["tail"]
    from ..metrics.base import NullMoments

    moments = {(side, key): NullMoments(*row) for side, per in entry["moments"].items() for key, row in per.items()}
    identity = {**table["identity"], "kgeval_version": table["kgeval_version"]}
    return NullModel(table["dataset"], protocol, hist, num_entities=entry["num_entities"], identity=identity,
                     source="shipped table", moments=moments)
