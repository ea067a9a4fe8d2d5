"""``kgeval explain A B``: why two evaluations' numbers differ (:func:`kgeval.explain`).

``A`` and ``B`` are run directories (``kgeval pipeline -o``, ``kgeval evaluate -o``), results files
(``results.json``) or, for ``B``, a tool's preset name (``pykeen``, ``libkge``, ...). With a run
directory as ``A`` its model is evaluated again where the filter sets differ.
"""

from __future__ import annotations

import json

import click

from .common import data_dir_option, format_option


@click.command("explain")
@click.argument("a")
@click.argument("b")
@click.option("--metric", "metrics", multiple=True,
              help="Headline metric to measure (repeatable): mrr, mr, hits@K [default: mrr, mr, hits@1, hits@3, hits@10].")
@data_dir_option
@format_option()
def command(a, b, metrics, data_dir, fmt):
    """Why do two numbers differ? Every protocol difference and its measured effect.

    Example: kgeval explain runs/distmult libkge
    """
    from ..results.effects import HEADLINE_METRICS
    from ..workflow.explain import explain

    explanation = explain(a, b, metrics=tuple(metrics) or HEADLINE_METRICS, data_dir=data_dir)
    if fmt == "json":
        click.echo(json.dumps(explanation.to_dict(), indent=2, allow_nan=False, default=str))
    else:
        click.echo(explanation.to_text())
