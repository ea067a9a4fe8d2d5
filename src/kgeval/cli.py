"""The ``kgeval`` command.

``kgeval metrics FILE`` computes every metric from a rank file; the workflow commands
(``pipeline``, ``evaluate``, ``datasets``, ``hpo``) live in :mod:`kgeval.cli_workflow`.
User mistakes print ``error: <message>`` and exit with status 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
from importlib import resources

import click

from .errors import KGEvalError

EXAMPLE_RANKS = "nations-distmult-ranks.tsv"


class _Group(click.Group):
    """Turns kgeval's own errors into one clear line and exit status 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KGEvalError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="kgeval")
def main():
    """kgeval: exact, fast, comparable rank-based evaluation of link prediction."""


def example_rank_file() -> str:
    return str(resources.files("kgeval") / "examples" / EXAMPLE_RANKS)


@main.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--example", is_flag=True, help="Use the rank file shipped with kgeval (DistMult on Nations).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--metric", "-m", "selected", multiple=True, help="Metric key(s) to show, e.g. mrr, tail.hits@10 (repeatable).")
@click.option("--rank-type", default="realistic", show_default=True, help="Rank type of the table view.")
def metrics(file, example, fmt, selected, rank_type):
    """Compute every rank-based metric from a CSV/TSV rank FILE.

    Columns (header required): optimistic and pessimistic (or a single rank),
    num_candidates (needed for adjusted/z metrics), optional side (head/tail) and weight.
    """
    from .keys import RANK_TYPES
    from .ranks import RankTable
    from .results import HEADLINE, Results

    if rank_type not in RANK_TYPES:
        raise click.BadParameter(f"unknown rank type {rank_type!r}; choose from {', '.join(RANK_TYPES)}")
    if file is None:
        if not example:
            raise click.UsageError("give a rank FILE, or --example for the shipped one")
        file = example_rank_file()
    table = RankTable.load(file)
    results = Results(table, protocol={"source": str(file)})
    if selected:
        values = {key: results.get_metric(key) for key in selected}
        if fmt == "json":
            click.echo(json.dumps(values, indent=2))
        else:
            width = max(len(k) for k in values)
            for k, v in values.items():
                click.echo(f"{k:<{width}}  {v:.6g}")
        return
    if fmt == "json":
        click.echo(json.dumps(results.to_flat_dict(), indent=2, sort_keys=True))
        return
    headline = list(HEADLINE) + ["geometric_mean_rank", "median_rank", "z_hits_at_10"]
    click.echo(f"{len(table)} ranking tasks from {file}")
    click.echo(results.summary_table(headline, rank_type=rank_type))
    if table.num_candidates is None:
        click.echo("note: no num_candidates column, so adjusted and z metrics are omitted")
    click.echo("all metrics: --format json; one metric: --metric KEY (e.g. tail.pessimistic.hits@10)")


def _register_workflow() -> None:
    try:
        from . import cli_workflow
    except ImportError as exc:  # the workflow module is optional during development
        if "cli_workflow" not in str(exc):
            raise
        return
    cli_workflow.register(main)


_register_workflow()

if __name__ == "__main__":  # pragma: no cover
    main()
