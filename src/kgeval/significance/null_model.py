"""The null model of an evaluation: every metric's expectation and variance when ranks are random.

Under the null model each task's rank is uniform on 1..Cᵢ, independently (Hoyt, Berrendorf et
al., 2022, §3), so E[M] and Var[M] depend on the candidate counts Cᵢ alone, e.g.

    E[MR] = mean((Cᵢ + 1) / 2),   E[MRR] = mean(H(Cᵢ) / Cᵢ),   E[hits@k] = mean(min(k, Cᵢ) / Cᵢ).

:func:`null_model` counts the candidates of a dataset's split (:mod:`.candidates`, no model
needed) and every metric's :meth:`~kgeval.metrics.Metric.null_moments` gives the moments; for a
registered dataset whose files are absent, the table shipped with kgeval (:mod:`.null_tables`,
the paper's §4.2 database, read by :func:`load_shipped`) holds the same candidate histograms and moments.
"""

from __future__ import annotations

import math

import numpy as np

from .._compat import install_hint
from .._version import __version__
from ..data import Dataset, dataset_available, get_dataset
from ..data.registry import lookup
from ..errors import InvalidInputError, NoClosedFormError
from ..keys import parse_key
from ..metrics.base import NullMoments
from ..metrics.derived import DerivedMetric
from .candidates import SIDES, CandidateHistogram, NullProtocol, candidate_histograms
from .null_tables import FORMAT as TABLE_FORMAT
from .null_tables import read_shipped, shipped_protocols

__all__ = ["NullModel", "null_model", "tabulated_metrics", "from_dataset", "build_table", "load_shipped"]


def tabulated_metrics() -> list:
    """The base metrics whose null moments a table holds: every default base metric with a
    stated expectation, and the two registered power means (``count`` left out: not random)."""
    from ..metrics import PowerMeanRank, default_metrics

    out = [m for m in default_metrics() if not isinstance(m, DerivedMetric) and m.key != "count"]
    out += [PowerMeanRank(2), PowerMeanRank(-0.5)]
    probe = np.array([1, 2, 3], dtype=np.int64)
    return [m for m in out if m._null_moments(probe, None).mean is not None]


class NullModel:
    """Null expectations and variances of one dataset's evaluation (see the module docstring).

    Keys are metric keys with an optional side: ``"both.inverse_harmonic_mean_rank"``,
    ``"tail.hits@10"``, ``"mrr"`` (side ``both``); a rank type in the key is accepted and
    ignored (random ranks have no ties). Wrappers work too (``E[z_mrr] = 0``).
    """

    def __init__(self, dataset: str, protocol: NullProtocol, histograms: dict[str, CandidateHistogram], *,
                 num_entities: int, identity: dict, source: str, moments: dict | None = None):
        self.dataset = dataset
        self.protocol = protocol
        self.histograms = histograms
        self.num_entities = int(num_entities)
        #: the dataset the counts come from: sha256 per split, sizes, kgeval version of a shipped table
        self.identity = identity
        #: ``"files"`` (counted now) or ``"shipped table"``
        self.source = source
        self._moments: dict[tuple[str, str], NullMoments] = dict(moments or {})

    def __repr__(self) -> str:
        return f"NullModel({self.dataset!r}, {self.protocol.key}, {self.num_tasks('both')} tasks, from {self.source})"

    # ------------------------------------------------------------------ candidates
    def num_candidates(self, side: str = "both") -> np.ndarray:
        """Every task's number of candidates on ``side``, sorted (the histogram expanded)."""
        return self.histograms[self._side(side)].expand()

    def num_tasks(self, side: str = "both") -> int:
        return self.histograms[self._side(side)].num_tasks

    @staticmethod
    def _side(side: str) -> str:
        from .._validation import Side

        return side if side == "both" else Side.parse(side).label

    # ------------------------------------------------------------------ moments
    def moments(self, key: str) -> NullMoments:
        """The :class:`~kgeval.metrics.NullMoments` of ``key`` (see the class docstring)."""
        from .. import metrics

        side, _, name = parse_key(key)
        metric = metrics.get(name)
        if isinstance(metric, DerivedMetric):
            return metric.moments(self._base_moments(side, metric.base))
        return self._base_moments(side, metric)

    def _base_moments(self, side: str, metric) -> NullMoments:
        cache_key = (side, metric.key)
        if cache_key not in self._moments:
            self._moments[cache_key] = metric._null_moments(self.num_candidates(side), None)
        return self._moments[cache_key]

    def expected_value(self, key: str) -> float:
        """E[M] under the null model."""
        return self._moment(key, "mean")

    def variance(self, key: str) -> float:
        """Var[M] under the null model."""
        return self._moment(key, "variance")

    def std(self, key: str) -> float:
        return math.sqrt(max(self.variance(key), 0.0))

    def _moment(self, key: str, which: str) -> float:
        value = getattr(self.moments(key), which)
        if value is None:
            what = "expectation" if which == "mean" else "variance"
            raise NoClosedFormError(f"{key}: no analytic null {what} is known for this metric")
        return float(value)

    def keys(self) -> list[str]:
        """``side.metric_key`` of every tabulated metric and side."""
        return [f"{side}.{m.key}" for side in SIDES for m in tabulated_metrics()]

    # ------------------------------------------------------------------ export
    def to_dict(self) -> dict:
        """Dataset, protocol, source, candidate histograms and ``{key: moments}`` (JSON-ready)."""
        moments = {}
        for key in self.keys():
            # NullMoments' own dict: with ``optimum_gap`` where stated (the adjusted index and z-score of
            # values near the optimum need it; see :meth:`from_dict`)
            moments[key] = self.moments(key).to_dict()
        return {
            "dataset": self.dataset, "protocol": self.protocol.to_dict(), "description": self.protocol.describe(),
            "num_entities": self.num_entities, "source": self.source, "identity": self.identity,
            "num_tasks": {side: self.num_tasks(side) for side in SIDES},
            "candidates": {side: self.histograms[side].to_pairs() for side in ("head", "tail")},
            "moments": moments,
        }

    @classmethod
    def from_dict(cls, d: dict) -> NullModel:
        """Inverse of :meth:`to_dict`. Moments written before ``optimum_gap`` existed load without it
        (the wrappers then fall back to ``opt − E``, see :attr:`NullMoments.optimum_gap`)."""
        try:
            p = d["protocol"]
            protocol = NullProtocol(p["split"], p["filtered"], p["filter_validation_when_testing"], p["drop_unseen"])
            histograms = {side: CandidateHistogram.from_pairs(d["candidates"][side]) for side in ("head", "tail")}
            histograms["both"] = histograms["head"] + histograms["tail"]
            moments = {}
            for key, m in (d.get("moments") or {}).items():
                side, name = key.split(".", 1)
                moments[(side, name)] = NullMoments.from_dict(m)
            return cls(d["dataset"], protocol, histograms, num_entities=d["num_entities"],
                       identity=d.get("identity") or {}, source=d.get("source", "dict"), moments=moments)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidInputError(f"not a NullModel.to_dict() document: {exc!r}") from None

    def to_records(self) -> list[dict]:
        rows = []
        for key in self.keys():
            side, metric = key.split(".", 1)
            m = self.moments(key)
            std = None if m.variance is None else math.sqrt(max(m.variance, 0.0))
            rows.append({"side": side, "metric": metric, "expected_value": m.mean, "variance": m.variance,
                         "std": std, "exact": m.exact})
        return rows

    def to_df(self):
        """One row per side and metric (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - pandas is in the test extra
            raise InvalidInputError(f"to_df() needs pandas ({install_hint('pandas', 'pandas')}); use to_records()") from exc
        return pd.DataFrame(self.to_records())


def null_model(dataset, split: str = "test", *, filtered: bool = True, filter_validation_when_testing: bool = True,
               drop_unseen: bool = False, data_dir=None) -> NullModel:
    """The null model of evaluating on ``split`` of ``dataset`` (a registered name, a directory, or a
    :class:`~kgeval.data.Dataset`), under the workflow's filtering rules.

    Counts the candidates from the dataset's files when they can be read; for a registered
    dataset whose files are absent, returns the table shipped with kgeval (``.source`` says which).
    A :class:`~kgeval.data.Dataset` object carries its own unseen-entity handling: ``drop_unseen=True``
    is refused for one built without it.

    Examples
    --------
    >>> import kgeval
    >>> null = kgeval.null_model("nations", "test")  # the shipped table: no files needed
    >>> round(null.expected_value("both.mrr"), 4)  # what random ranking scores on Nations
    0.3844
    """
    if isinstance(dataset, Dataset):
        if drop_unseen and not dataset.dropped:
            raise InvalidInputError("drop_unseen=True needs a dataset name or path (or a Dataset built with "
                                    "drop_unseen=True), not a Dataset object that kept unseen entities")
        protocol = NullProtocol(split, filtered, filter_validation_when_testing, bool(dataset.dropped))
        return from_dataset(dataset, protocol)
    protocol = NullProtocol(split, filtered, filter_validation_when_testing, drop_unseen)
    info = lookup(dataset) if isinstance(dataset, str) else None
    if info is not None and not dataset_available(info.name, data_dir=data_dir):
        shipped = load_shipped(info.name, protocol)
        if shipped is not None:
            return shipped
    return from_dataset(get_dataset(dataset, data_dir=data_dir, drop_unseen=protocol.drop_unseen), protocol)


def from_dataset(ds, protocol: NullProtocol) -> NullModel:
    """Count ``ds``'s candidates under ``protocol`` (the table generator uses this too)."""
    identity = {"num_entities": ds.num_entities, "num_relations": ds.num_relations,
                "sizes": {"train": len(ds.training), "valid": len(ds.validation), "test": len(ds.testing)}}
    if ds.reference is not None:  # registered or loaded from files: the file hashes are known
        identity["sha256"] = ds.hashes()
    return NullModel(ds.name, protocol, candidate_histograms(ds, protocol), num_entities=ds.num_entities,
                     identity=identity, source="files")


def build_table(name: str, data_dir=None) -> dict:
    """The table of registered dataset ``name`` from its files (keep- and drop-unseen loads)."""
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
    return {"format": TABLE_FORMAT, "dataset": loaded[False].name, "kgeval_version": __version__,
            "identity": full.identity, "protocols": protocols}


def _moment_row(m) -> list:
    return [m.mean, m.variance, m.exact, m.optimum_gap]


def load_shipped(name: str, protocol: NullProtocol) -> NullModel | None:
    """The :class:`NullModel` of ``protocol`` from the shipped table of ``name``, or None."""
    table = read_shipped(name)
    if table is None or protocol.key not in table["protocols"]:
        return None
    entry = table["protocols"][protocol.key]
    hist = {side: CandidateHistogram.from_pairs(pairs) for side, pairs in entry["candidates"].items()}
    hist["both"] = hist["head"] + hist["tail"]
    moments = {(side, key): NullMoments(*row) for side, per in entry["moments"].items() for key, row in per.items()}
    identity = {**table["identity"], "kgeval_version": table["kgeval_version"]}
    return NullModel(table["dataset"], protocol, hist, num_entities=entry["num_entities"], identity=identity,
                     source="shipped table", moments=moments)
