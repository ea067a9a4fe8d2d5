"""Breakdowns of saved runs: the run's own dataset gives the triples a grouping counts on.

:func:`run_grouping_data` loads the dataset a run was trained and evaluated on (by name, with the run's
``drop_unseen``), refuses one whose split hashes differ from those the run recorded (the ids would
name other entities), and returns the :class:`~kgeval.breakdowns.GroupingData` of the run's evaluated
split; :func:`breakdown_run` is ``kgeval breakdown``.
"""

from __future__ import annotations

import os

from ..breakdowns import GroupingData, grouping_data
from ..errors import InvalidInputError

__all__ = ["run_grouping_data", "breakdown_run"]


def run_grouping_data(run, protocol: dict | None = None, *, splits=None, threshold: float = 1.5, quantiles: int = 4,
                      data_dir=None) -> GroupingData:
    """The grouping data of a run (:class:`~kgeval.workflow.runs.Run`): its dataset's ``splits`` (default
    training) counted, its evaluated split as the evaluated triples, its relation names; ``protocol``: its
    results' protocol record.

    A restricted evaluation (entity or relation whitelists that dropped triples) numbers its tasks' triples
    among the kept ones: the evaluated triples are then left out, and a frequency breakdown says so.
    """
    from ..data import get_dataset

    name = run.config.dataset
    try:
        ds = get_dataset(name, data_dir=data_dir, drop_unseen=run.config.drop_unseen)
    except (InvalidInputError, OSError) as exc:
        raise InvalidInputError(f"the breakdown counts on the run's dataset {name!r}, which could not be loaded "
                                f"here: {exc}") from None
    saved = ((run.metadata or {}).get("dataset") or {}).get("hashes") or {}
    current = ds.hashes()
    differ = [s for s in saved if s in current and saved[s] != current[s]]
    if differ:
        raise InvalidInputError(f"the dataset {name!r} found here is not the one the run {str(run.directory)!r} "
                                f"used (its {', '.join(differ)} split hashes differ): its ids would name other "
                                "entities and relations")
    data = grouping_data(dataset=ds, split=run.config.evaluation.split, splits=splits, threshold=threshold,
                         quantiles=quantiles)
    restriction = (protocol or {}).get("restriction") or {}
    if restriction.get("num_triples_dropped"):
        data = GroupingData(data.counted, data.counted_on, None, data.relation_labels, data.threshold,
                            data.quantiles)
    return data


def breakdown_run(directory: str | os.PathLike, by="category", *, splits=None, threshold: float = 1.5,
                  quantiles: int = 4, data_dir=None, **options):
    """The :class:`~kgeval.results.breakdown.Breakdown` of a run directory (``kgeval breakdown``).

    Parameters
    ----------
    directory : str or os.PathLike
        A run directory (``kgeval pipeline``'s output).
    by : str or mapping
        As :meth:`kgeval.results.Results.breakdown`.
    splits, threshold, quantiles
        As :func:`kgeval.breakdowns.grouping_data`, on the run's dataset.
    data_dir : str, optional
        Where large datasets live.
    **options
        ``metrics``, ``sides``, ``rank_type``, ``confidence``, ``num_resamples``, ``seed``
        (:meth:`kgeval.results.Results.breakdown`).

    Returns
    -------
    kgeval.results.breakdown.Breakdown

    Examples
    --------
    >>> import kgeval                                                                 # doctest: +SKIP
    >>> kgeval.pipeline(dataset="nations", model="distmult", epochs=2).save("run")   # doctest: +SKIP
    >>> print(breakdown_run("run", "category", confidence=None))                     # doctest: +SKIP
    """
    from ..results.breakdown import breakdown_of, options as make_options
    from .runs import load_run_results

    run, results = load_run_results(directory)
    data = run_grouping_data(run, results.protocol, splits=splits, threshold=threshold, quantiles=quantiles,
                             data_dir=data_dir)
    check_frequency(by, data)
    return breakdown_of(results, by, data, make_options(**options))


def check_frequency(by, data: GroupingData) -> None:
    """Refuse a frequency breakdown of a restricted evaluation by name (its triples were left out)."""
    if isinstance(by, str) and "frequency" in by.lower() and data.evaluated is None:
        raise InvalidInputError("the frequency breakdowns need each task's evaluation triple, which a restricted "
                                "evaluation (entity or relation whitelist) numbers among its kept triples only; "
                                "break it down by category or relation instead")
