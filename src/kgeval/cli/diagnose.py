"""``kgeval diagnose DATASET``: unseen entities, leakage and suspicious relations of a dataset."""

from __future__ import annotations

import json

import click

from .common import data_dir_option, format_option


@click.command("diagnose")
@click.argument("dataset")
@click.option("--threshold", default=0.97, show_default=True, type=click.FloatRange(0, 1, min_open=True),
              help="Jaccard similarity of two relations' (head, tail) sets at or above which they are duplicates "
                   "(inverses: one set reversed); 0.97 as Toutanova & Chen (2015) and PyKEEN's Sealant.")
@click.option("--cartesian-threshold", default=0.8, show_default=True, type=click.FloatRange(0, 1, min_open=True),
              help="Share of heads x tails a relation's triples fill at or above which it is a Cartesian "
                   "product (Akrami et al., 2020).")
@click.option("--relations-on", type=click.Choice(["all", "training"]), default="all", show_default=True,
              help="Find relation pairs and Cartesian products in all splits or in the training split only.")
@data_dir_option
@format_option()
def command(dataset, threshold, cartesian_threshold, relations_on, data_dir, fmt):
    """Diagnose DATASET (a name or a directory of train/valid/test files): per evaluation split, the entities
    unseen in training and the triples containing them, the triples already in training, reverse leakage
    ((t, r', h) in training) and duplicate leakage ((h, r', t) in training, r' != r); over the relations,
    inverse, duplicate and symmetric relations and Cartesian-product relations. One verdict per finding."""
    from ..data.diagnostics import diagnose

    d = diagnose(dataset, threshold=threshold, cartesian_threshold=cartesian_threshold, relations_on=relations_on,
                 data_dir=data_dir)
    click.echo(json.dumps(d.to_dict(), indent=2) if fmt == "json" else str(d))
