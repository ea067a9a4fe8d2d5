"""``kgeval datasets [NAME]``: the known datasets, their statistics and availability."""

from __future__ import annotations

import json

import click

from .common import count, data_dir_option, format_option


@click.command("datasets")
@click.argument("name", required=False)
@data_dir_option
@format_option()
def command(name, data_dir, fmt):
    """List the known datasets with their published statistics and availability.

    With NAME, load that dataset and show its statistics (including triples whose
    entities never occur in training).
    """
    from ..data import DATASETS, data_dirs, dataset_available, get_dataset

    if name:
        summary = get_dataset(name, data_dir=data_dir).summary()
        if fmt == "json":
            click.echo(json.dumps(summary, indent=2))
        else:
            for k, v in summary.items():
                click.echo(f"{k:<26} {v}")
        return
    rows = []
    for info in DATASETS.values():
        available = dataset_available(info.name, data_dir=data_dir)
        rows.append({
            "name": info.name.lower(), "entities": info.num_entities, "relations": info.num_relations,
            "train": info.num_training, "valid": info.num_validation, "test": info.num_testing,
            "available": "packaged" if info.builtin else ("yes" if available else "no"),
        })
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    header = ["name", "entities", "relations", "train", "valid", "test", "available"]
    cells = [[r["name"]] + [count(r[h]) for h in header[1:6]] + [r["available"]] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]

    def fmt_row(row):
        return "  ".join(c.ljust(w) if i in (0, 6) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    click.echo(fmt_row(header))
    click.echo("-" * len(fmt_row(header)))
    for c in cells:
        click.echo(fmt_row(c))
    dirs = ", ".join(str(d) for d in data_dirs(data_dir))
    click.echo("")
    click.echo(f"large datasets are read from <dir>/<Name>/{{train,valid,test}}.txt in: {dirs} "
               f"(set KGEVAL_DATA, a colon-separated list, to change)")
