"""``kgeval metrics FILE``: every rank-based metric from a rank file (format: :mod:`kgeval.rankfile`)."""

from __future__ import annotations

import json
from importlib import resources

import click

from .common import format_option, rank_type_callback

EXAMPLE_RANKS = "nations-distmult-ranks.tsv"


def example_rank_file() -> str:
    return str(resources.files("kgeval") / "examples" / EXAMPLE_RANKS)


@click.command("metrics")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--example", is_flag=True, help="Use the rank file shipped with kgeval (DistMult on Nations).")
@format_option()
@click.option("--metric", "selected", multiple=True, help="Metric key(s) to show, e.g. mrr, tail.hits@10 (repeatable).")
@click.option("--rank-type", default="realistic", show_default=True, callback=rank_type_callback(),
              help="Rank type of the table view and of the --metric keys that name none: optimistic (best), "
                   "pessimistic (worst), realistic (avg), expected.")
def command(file, example, fmt, selected, rank_type):
    """Compute every rank-based metric from a CSV/TSV rank FILE.

    Columns (header required): optimistic and pessimistic (or a single rank),
    num_candidates (needed for adjusted/z metrics), optional side (head/tail/both), weight,
    triple_index and relation. Also reads the .npz files RankTable.save writes.
    """
    from ..ranks import RankTable
    from ..results import HEADLINE, Results
    from ..results.render import truthful

    if file is not None and example:  # --example was ignored: the FILE's metrics were printed
        raise click.UsageError("give a rank FILE or --example, not both")
    if file is None:
        if not example:
            raise click.UsageError("give a rank FILE, or --example for the shipped one")
        file = example_rank_file()
    table = RankTable.load(file)
    results = Results(table, protocol={"source": str(file)})
    if selected:
        from ..keys import flat_key, parse_key

        # --rank-type applies to the keys that name no rank type of their own (it was ignored: --metric mrr
        # --rank-type pessimistic printed the realistic MRR)
        values = {key: results.get_metric(flat_key(*parse_key(key, default_rank_type=rank_type))) for key in selected}
        if fmt == "json":
            click.echo(json.dumps(values, indent=2))
        else:
            width = max(len(k) for k in values)
            for k, v in values.items():
                click.echo(f"{k:<{width}}  {truthful(f'{v:.6g}', v)}")
        return
    if fmt == "json":
        click.echo(json.dumps(results.to_flat_dict(p_values=True), indent=2, sort_keys=True))
        return
    headline = list(HEADLINE) + ["geometric_mean_rank", "median_rank", "z_hits_at_10"]
    click.echo(f"{len(table)} ranking tasks from {file}")
    click.echo(results.summary_table(headline, rank_type=rank_type))
    if table.num_candidates is None:
        click.echo("note: no num_candidates column, so adjusted and z metrics are omitted")
    click.echo("all metrics: --format json; one metric: --metric KEY (e.g. tail.pessimistic.hits@10)")
