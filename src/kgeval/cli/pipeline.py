"""``kgeval pipeline``: train a model, evaluate it on test and save the run."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import click

from ..errors import InvalidInputError
from .common import count, data_dir_option, format_option, headline_table, metrics_payload, protocol_lines, split_list


def _default_output(dataset: str, model: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("kgeval-output") / f"{str(dataset).lower().replace('/', '_')}-{model.lower()}-{stamp}"
    path, i = base, 1
    while path.exists():
        path = base.with_name(f"{base.name}-{i}")
        i += 1
    return path


@click.command("pipeline")
@click.option("--dataset", "-d", required=True, help="Dataset name (nations, kinships, umls, fb15k-237, ...) or directory.")
@click.option("--model", "-m", required=True, help="Model name (complex, distmult, transe, rotate, tucker, pairre).")
@click.option("--epochs", type=click.IntRange(min=1), help="Training epochs [default: per model].")
@click.option("--dim", type=click.IntRange(min=1), help="Embedding dimension [default: per model].")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), help="Learning rate [default: per model].")
@click.option("--batch-size", type=click.IntRange(min=1), help="Training batch size [default: per model].")
@click.option("--num-negatives", type=click.IntRange(min=1), help="Negatives per triple (sLCWA) [default: per model].")
@click.option("--loop", type=click.Choice(["lcwa", "slcwa"]), help="Training loop [default: per model].")
@click.option("--seed", type=int, default=42, show_default=True, help="Random seed.")
@click.option("--output", "-o", type=click.Path(file_okay=False),
              help="Output directory [default: ./kgeval-output/<dataset>-<model>-<timestamp>].")
@click.option("--early-stopping", is_flag=True, help="Stop on the validation MRR (filtered with train + valid).")
@click.option("--patience", type=click.IntRange(min=1), help="Early stopping: evaluations without improvement.")
@click.option("--frequency", type=click.IntRange(min=1), help="Early stopping: evaluate every N epochs.")
@click.option("--relation-whitelist", help="Comma-separated relation labels or ids to evaluate on.")
@click.option("--entity-whitelist", help="Comma-separated entity labels or ids (triples and candidates).")
@click.option("--no-filter-validation", is_flag=True, help="Do not filter validation triples when testing.")
@data_dir_option
@format_option
@click.option("--threads", type=click.IntRange(min=1), help="torch CPU threads [default: 1 for small graphs].")
@click.option("--progress/--no-progress", default=False, show_default=True, help="Show progress bars (stderr).")
def command(dataset, model, epochs, dim, lr, batch_size, num_negatives, loop, seed, output, early_stopping, patience,
            frequency, relation_whitelist, entity_whitelist, no_filter_validation, data_dir, fmt, threads, progress):
    """Train MODEL on DATASET, evaluate on test and save everything to an output directory.

    Example: kgeval pipeline --dataset nations --model complex
    """
    from ..data import get_dataset
    from ..errors import unknown_name
    from ..models import model_names
    from ..pipeline import pipeline

    if (patience or frequency) and not early_stopping:
        raise InvalidInputError("--patience and --frequency need --early-stopping")
    if str(model).lower() not in model_names():
        raise unknown_name("model", model, model_names())
    ds = get_dataset(dataset, data_dir=data_dir)
    out_dir = Path(output) if output else _default_output(ds.name, model)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise InvalidInputError(f"output directory {out_dir} already exists and is not empty")
    stopper_kwargs = {k: v for k, v in (("patience", patience), ("frequency", frequency)) if v}
    result = pipeline(
        dataset=ds, model=model,
        model_kwargs={"dim": dim} if dim else None,
        training_loop=loop,
        training_kwargs={k: v for k, v in (("batch_size", batch_size), ("num_negatives", num_negatives)) if v} or None,
        optimizer_kwargs={"lr": lr} if lr else None,
        epochs=epochs,
        stopper="early" if early_stopping else None,
        stopper_kwargs=stopper_kwargs or None,
        evaluation_relation_whitelist=split_list(relation_whitelist),
        evaluation_entity_whitelist=split_list(entity_whitelist),
        filter_validation_when_testing=not no_filter_validation,
        random_seed=seed, progress=progress, num_threads=threads,
    )
    saved = result.save(out_dir)
    cfg = result.configuration
    if fmt == "json":
        click.echo(json.dumps({
            "dataset": ds.name, "model": cfg["model"], "metrics": metrics_payload(result.results),
            "timings": result.timings, "epochs_run": result.training.epochs_run,
            "configuration": cfg, "protocol": result.results.protocol, "output": str(saved),
        }, indent=2, default=str))
        return
    tr = result.training
    click.echo(f"{cfg['model']} on {ds.name} ({count(ds.num_entities)} entities, {count(ds.num_relations)} relations)")
    click.echo(
        f"training: {tr.epochs_run} epochs ({cfg['training_loop']}, dim {cfg['model_kwargs'].get('dim')}, "
        f"lr {cfg['optimizer_kwargs'].get('lr')}, seed {cfg['random_seed']})"
        + (f", stopped early at best epoch {tr.best_epoch}" if tr.stopped_early else "")
        + f", {result.timings['training']:.1f} s"
        + (f"; final loss {tr.losses[-1]:.4f}" if tr.losses else "")
    )
    for line in protocol_lines(result.results, ds, "testing", not no_filter_validation,
                               {"relations": cfg["evaluation_relation_whitelist"],
                                "entities": cfg["evaluation_entity_whitelist"]}):
        click.echo(line)
    click.echo("")
    click.echo(headline_table(result.results))
    click.echo("")
    click.echo(f"wrote {saved} (config.json, results.json, rank_table.npz, model.pt, losses.json)")
