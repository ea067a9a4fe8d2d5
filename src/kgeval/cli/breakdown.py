"""``kgeval breakdown RUN_DIR --by category``: a saved run's metrics per group of tasks, each group with its
value, interval, null expectation, adjusted index, z-score and p-value (:meth:`kgeval.results.Results.breakdown`).

The grouping options (``--by``, ``--group``, ``--splits``, ``--threshold``, ``--quantiles``) are declared here
once and shared with ``kgeval compare --by`` (:func:`grouping_options`).
"""

from __future__ import annotations

import csv
import io
import json
import math

import click

from .common import data_dir_option, format_option, rank_type_callback, side_option, split_list

#: ``--by`` choices: the groupings of :func:`kgeval.breakdowns.group_tasks` as a command line spells them
BY_CHOICES = ("category", "frequency", "query-frequency", "relation", "group")


def grouping_options(func):
    """``--by``, ``--group``, ``--splits``, ``--threshold``, ``--quantiles``, ``--data-dir``: one declaration for
    ``kgeval breakdown`` and ``kgeval compare``."""
    for option in reversed((
        click.option("--by", type=click.Choice(BY_CHOICES), default=None,
                     help="Group the tasks by relation category (1-1, 1-N, N-1, N-N; Bordes et al. 2013), the answer "
                          "(query) entity's training degree in quantile buckets, relation, or the --group groups."),
        click.option("--group", "groups", multiple=True, metavar="NAME=REL[,REL...]",
                     help="A named group of relations (names or ids; repeatable); the rest is 'other'. Implies "
                          "--by group."),
        click.option("--splits", default=None, metavar="SPLIT[,SPLIT...]",
                     help="The splits categories and degrees are counted on [default: train]."),
        click.option("--threshold", type=float, default=1.5, show_default=True,
                     help="A category side is 1 when its mean (tails per head, heads per tail) is below it."),
        click.option("--quantiles", type=click.IntRange(min=1), default=4, show_default=True,
                     help="The number of degree buckets of --by frequency / query-frequency."),
        data_dir_option,
    )):
        func = option(func)
    return func


def grouping(by: str | None, groups: tuple[str, ...], *, required: bool):
    """The ``by`` argument of the Python API from ``--by`` and ``--group``: a grouping name, or a mapping
    of group names to relations; None where neither is given and none is ``required``."""
    from ..errors import InvalidInputError

    if groups and by not in (None, "group"):
        raise InvalidInputError(f"--group makes groups of relations: it cannot be combined with --by {by}")
    if by == "group" and not groups:
        raise InvalidInputError("--by group needs at least one --group NAME=REL[,REL...]")
    if groups:
        mapping: dict[str, list[str]] = {}
        for text in groups:
            name, sep, relations = text.partition("=")
            items = [r.strip() for r in relations.split(",") if r.strip()]
            if not sep or not name.strip() or not items:
                raise InvalidInputError(f"--group {text!r}: write NAME=REL[,REL...], e.g. --group "
                                        "family=husband,wife")
            if name.strip() in mapping:
                raise InvalidInputError(f"--group: the group {name.strip()!r} is given twice")
            mapping[name.strip()] = items
        return mapping
    if by is None:
        return "category" if required else None
    return by.replace("-", "_")


@click.command("breakdown")
@click.argument("run", type=click.Path(file_okay=False))
@grouping_options
@click.option("--metric", "metrics", multiple=True, help="Metric to break down (repeatable) [default: mrr, hits@1, "
                                                         "hits@10].")
@side_option("The ranking tasks shown")
@click.option("--rank-type", default="realistic", show_default=True,
              callback=rank_type_callback(("optimistic", "pessimistic", "realistic")),
              help="Rank type: optimistic (best), pessimistic (worst) or realistic (avg).")
@click.option("--intervals/--no-intervals", default=True, show_default=True,
              help="Bootstrap (BCa) intervals of every group's values (--no-intervals: faster).")
@click.option("--confidence", type=float, default=0.95, show_default=True, help="Level of the intervals, in (0, 1).")
@click.option("--resamples", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Bootstrap resamples per group, at least 10 / (1 - confidence) (200 at 0.95).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the resampling, in [0, 2**32).")
@format_option(csv=True)
def command(run, by, groups, splits, threshold, quantiles, data_dir, metrics, side, rank_type, intervals, confidence,
            resamples, seed, fmt):
    """A saved run's metrics per group of tasks: relation category, entity frequency, relation or named
    relation groups, each with its interval, expectation under chance, adjusted index, z-score and p-value.

    Example: kgeval breakdown runs/distmult --by category
    """
    from .._validation import check_probability, check_seed
    from ..significance.bootstrap import check_num_resamples
    from ..workflow.breakdowns import breakdown_run

    check_seed("--seed", seed)
    if intervals:
        confidence = check_probability("--confidence", confidence)
        check_num_resamples("--resamples", resamples, confidence, "bca")
    table = breakdown_run(run, grouping(by, groups, required=True), splits=split_list(splits), threshold=threshold,
                          quantiles=quantiles, data_dir=data_dir,
                          metrics=tuple(metrics) or ("mrr", "hits@1", "hits@10"),
                          sides=(side,), rank_type=rank_type, confidence=confidence if intervals else None,
                          num_resamples=resamples, seed=seed)
    if fmt == "json":
        click.echo(json.dumps(_plain(table.to_dict()), indent=2))
    elif fmt == "csv":
        from ..results.breakdown import COLUMNS

        click.echo(to_csv(table.rows, list(COLUMNS)), nl=False)
    else:
        click.echo(str(table))


def _plain(value):
    """JSON-able: NaN and infinities as null (JSON has neither), numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_csv(rows: list[dict], columns: list[str]) -> str:
    """Rows as CSV, text quoted (a group named ``=cmd|...`` is no spreadsheet formula, a CR no row break)."""
    from .._escape import csv_text

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writeheader()
    writer.writerows({k: csv_text(v) if isinstance(v, str) else _plain(v) for k, v in r.items()} for r in rows)
    return out.getvalue()
