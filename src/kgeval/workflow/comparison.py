"""``kgeval.compare`` on run directories: each run (or replicate directory) read into a model of
:mod:`kgeval.significance.align`, then compared by :func:`kgeval.significance.compare.compare`.

The statistics take loaded Results and never read a directory; reading them is this layer's job.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..data.splits import canonical_split
from ..errors import InvalidInputError
from ..significance.align import Model, replicates
from ..significance.compare import DEFAULT_METRICS
from ..significance.compare import compare as compare_models
from .replicates import REPLICATES_FILE, load_replicates
from .runs import load_run_results

__all__ = ["compare", "run_model"]


def _load_run(directory: Path, name: str) -> Model:
    run, results = load_run_results(directory)  # refused where results.json and the rank table disagree
    # the evaluated split beside the dataset's identity: a test run and a validation run are refused by it
    dataset = {**(run.metadata.get("dataset") or {}), "split": canonical_split(run.config.evaluation.split)}
    return Model(name, [results.rank_table], results.protocol, dataset, path=directory)


def run_model(path: str | os.PathLike) -> Model:
    """The compared model of a run directory, or of a replicate directory (``replicates.json``: one rank
    table per run, every run evaluated under the first run's protocol). Named by the directory.

    Parameters
    ----------
    path : str or os.PathLike
        A run directory (``kgeval pipeline -o``) or a replicate directory (``--replicates``).

    Returns
    -------
    kgeval.significance.align.Model
        Its name, rank tables, protocol, dataset identity and path.

    Raises
    ------
    InvalidInputError
        Not a kgeval run directory; a replicate set whose runs were evaluated differently
        (:class:`~kgeval.significance.align.ProtocolMismatchError`).
    """
    path = Path(path)
    if (path / REPLICATES_FILE).is_file():
        members = [_load_run(r, f"{path.name}/{r.name}") for r in load_replicates(path)]
        return replicates(path.name, members, f"the runs of the replicate set {str(path)!r}", path)
    return _load_run(path, path.name)


def compare(results_a, results_b, *more, metrics=DEFAULT_METRICS, side: str = "both",
            rank_type: str = "realistic", test: str = "permutation", num_resamples: int = 10_000, seed=None,
            correction: str | None = "holm", baseline=None, confidence: float = 0.95, by=None, dataset=None,
            **grouping):
    """Paired comparison of two or more models evaluated on the same tasks (``kgeval.compare``).

    Parameters
    ----------
    results_a, results_b, *more
        Models: :class:`~kgeval.Results` (with their rank table), :class:`~kgeval.RankTable`, lists of
        replicate Results, run directories or replicate directories, each optionally as ``(name, model)``.
    metrics, side, rank_type, test, num_resamples, seed, correction, baseline, confidence
        As :func:`kgeval.significance.compare.compare`.
    by : str or mapping, optional
        Compare per group of tasks (:func:`kgeval.significance.compare_groups.compare_groups`):
        ``"category"``, ``"frequency"``, ``"query_frequency"``, ``"relation"`` or ``{name: relations}``; the
        correction then runs over the rows of all groups.
    dataset : kgeval.data.Dataset, optional
        With ``by``: the dataset the grouping counts on (default: the first run directory's own dataset).
    **grouping
        With ``by``: ``split``, ``splits``, ``train_triples``, ``eval_triples``, ``relation_labels``,
        ``threshold``, ``quantiles`` (:func:`kgeval.breakdowns.grouping_data`), ``data_dir``.

    Returns
    -------
    pandas.DataFrame or list of dict
        One row per pair, metric and level (see :func:`kgeval.significance.compare.compare`); with ``by``,
        per group too (a first column ``group``).

    Examples
    --------
    >>> import numpy as np, kgeval
    >>> rng = np.random.default_rng(0)
    >>> C = np.full(60, 50)
    >>> a = kgeval.RankTable.from_ranks(rng.integers(1, 51, 60), num_candidates=C)
    >>> b = kgeval.RankTable.from_ranks(rng.integers(1, 51, 60), num_candidates=C)
    >>> rows = compare(a, b, metrics=["mrr"], num_resamples=100, seed=0)
    >>> len(rows)
    1
    """
    items = [_loaded(item) for item in (results_a, results_b, *more)]
    if by is not None:
        from ..significance.compare_groups import compare_groups

        data = _grouping_data(items, by, dataset, grouping)
        return compare_groups(*items, by=by, data=data, metrics=metrics, side=side, rank_type=rank_type, test=test,
                              num_resamples=num_resamples, seed=seed, correction=correction, baseline=baseline,
                              confidence=confidence)
    if dataset is not None or grouping:
        named = ", ".join(["dataset"] * (dataset is not None) + sorted(grouping))
        raise InvalidInputError(f"{named}: options of a comparison per group; pass by= (e.g. by='category')")
    return compare_models(*items, metrics=metrics, side=side, rank_type=rank_type, test=test,
                          num_resamples=num_resamples, seed=seed, correction=correction, baseline=baseline,
                          confidence=confidence)


#: the grouping options compare(by=...) passes on (kgeval.breakdowns.grouping_data, and where datasets live)
GROUPING_OPTIONS = ("split", "splits", "train_triples", "eval_triples", "relation_labels", "threshold", "quantiles",
                    "data_dir")


def _grouping_data(items, by, dataset, grouping: dict):
    """The grouping data of ``compare(by=...)``: from ``dataset`` or the arrays given, else from the first
    run directory's own dataset."""
    from ..breakdowns import grouping_data
    from .breakdowns import check_frequency, run_grouping_data
    from .runs import load_run

    unknown = sorted(set(grouping) - set(GROUPING_OPTIONS))
    if unknown:
        raise InvalidInputError(f"compare: unknown option(s) {unknown}; the grouping options are "
                                f"{', '.join(GROUPING_OPTIONS)}")
    data_dir = grouping.pop("data_dir", None)
    if dataset is not None or "train_triples" in grouping or "eval_triples" in grouping:
        data = grouping_data(dataset=dataset, **grouping)
    else:
        models = [m for m in (i[1] if isinstance(i, tuple) else i for i in items) if isinstance(m, Model)]
        path = next((m.path for m in models if m.path is not None), None)
        if path is None:
            data = grouping_data(**grouping)  # names and relations of the tables only (by relation, groups of ids)
        else:
            own = sorted(set(grouping) & {"split", "relation_labels"})
            if own:
                raise InvalidInputError(f"{', '.join(own)}: a run directory's evaluated split and relation names are "
                                        "its own; pass dataset= to count on another dataset")
            if (path / REPLICATES_FILE).is_file():
                path = load_replicates(path)[0]
            protocol = next(m.protocol for m in models if m.path is not None)
            data = run_grouping_data(load_run(path), protocol, data_dir=data_dir, **grouping)
            check_frequency(by, data)
    return data


def _loaded(item):
    if isinstance(item, (str, os.PathLike)):
        return run_model(item)
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], (str, os.PathLike)):
        return item[0], run_model(item[1])
    return item
