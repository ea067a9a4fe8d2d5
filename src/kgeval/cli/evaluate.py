"""``kgeval evaluate``: re-evaluate a saved model with the pipeline's filtering rules."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import InvalidInputError
from .common import data_dir_option, format_option, headline_table, metrics_payload, protocol_lines, split_list


@click.command("evaluate")
@click.option("--model-file", required=True, type=click.Path(exists=True),
              help="A pipeline output directory or a model.pt file.")
@click.option("--dataset", "-d", help="Dataset name or directory [default: the one in the output's config.json].")
@click.option("--split", type=click.Choice(["test", "valid"]), default="test", show_default=True)
@click.option("--relation-whitelist", help="Comma-separated relation labels or ids [default: as trained].")
@click.option("--entity-whitelist", help="Comma-separated entity labels or ids [default: as trained].")
@click.option("--no-filter-validation", is_flag=True, default=None,
              help="Do not filter validation triples when testing [default: as trained].")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Also write the results as JSON here.")
@data_dir_option
@format_option
def command(model_file, dataset, split, relation_whitelist, entity_whitelist, no_filter_validation, output,
            data_dir, fmt):
    """Re-evaluate a saved model on a split, with the pipeline's filtering rules."""
    from ..data import get_dataset
    from ..models import load_model
    from ..pipeline import evaluate_model, load_output

    path = Path(model_file)
    cfg = {}
    if path.is_dir():
        cfg = load_output(path)["configuration"]
        path = path / "model.pt"
    if dataset is None:
        if "dataset" not in cfg:
            raise InvalidInputError("--dataset is required when --model-file is a model file, not an output directory")
        dataset = cfg["dataset"]
    model = load_model(path)
    ds = get_dataset(dataset, data_dir=data_dir, drop_unseen=bool(cfg.get("drop_unseen", False)))
    filter_valid = cfg.get("filter_validation_when_testing", True) if no_filter_validation is None else not no_filter_validation
    rel = split_list(relation_whitelist) if relation_whitelist else cfg.get("evaluation_relation_whitelist")
    ent = split_list(entity_whitelist) if entity_whitelist else cfg.get("evaluation_entity_whitelist")
    results = evaluate_model(model, ds, split=split, filter_validation_when_testing=filter_valid,
                             evaluation_relation_whitelist=rel, evaluation_entity_whitelist=ent, progress=False)
    if output:
        results.save_json(output)
    split_name = "testing" if split == "test" else "validation"
    if fmt == "json":
        click.echo(json.dumps({"dataset": ds.name, "split": split, "metrics": metrics_payload(results),
                               "protocol": results.protocol}, indent=2, default=str))
        return
    click.echo(f"{getattr(model, 'name', type(model).__name__)} from {model_file} on {ds.name}")
    for line in protocol_lines(results, ds, split_name, filter_valid, {"relations": rel, "entities": ent}):
        click.echo(line)
    click.echo("")
    click.echo(headline_table(results))
