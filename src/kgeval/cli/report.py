"""``kgeval report RUN_DIR [RUN_DIR ...] -o FILE``: a report on saved runs (see :mod:`kgeval.report`)."""

from __future__ import annotations

import click


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=True, dir_okay=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The file to write.")
@click.option("--format", "fmt", default="html", show_default=True,
              type=click.Choice(["html", "md", "latex", "csv", "json"]), help="The report's format.")
@click.option("--metric", default="mrr", show_default=True, help="The metric of the figures and per-relation tables.")
@click.option("--confidence", default=0.95, show_default=True, type=float, help="Confidence of the intervals.")
@click.option("--resamples", default=1000, show_default=True, type=int, help="Bootstrap resamples per interval.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the resampling.")
def command(runs, output, fmt, metric, confidence, resamples, seed):
    """Write a report on saved runs: protocol, headline metrics with CIs, adjusted values, z, p,
    per-side and per-relation tables, the pairwise comparison and figures (HTML: one file)."""
    from ..report import build_report, write_report

    report = build_report(runs, metric=metric, confidence=confidence, num_resamples=resamples, seed=seed)
    path = write_report(report, output, format=fmt)
    click.echo(f"wrote {path} ({fmt}, {len(report.runs)} run(s))")
