"""The workflow commands of ``kgeval``: ``pipeline``, ``evaluate``, ``datasets``, ``hpo``.

:func:`register` adds them to the click group of :mod:`kgeval.cli`. Each command turns
kgeval's errors (and file-system errors) into ``error: <message>`` with exit status 2.
"""

from __future__ import annotations

import datetime
import functools
import json
import sys
from pathlib import Path

import click

from .errors import InvalidInputError, KGEvalError


def _clean_errors(fn):
    """Print ``error: <message>`` and exit 2 on user errors, whatever group the command is in."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:  # output piped into `head` etc.: not an error worth reporting
            sys.exit(1)
        except (KGEvalError, OSError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)

    return wrapper


def _split_list(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise InvalidInputError(f"empty whitelist {value!r}")
    return items


def _count(n: int) -> str:
    return f"{n:,}"


def describe_filtering(dataset, split: str, filter_validation_when_testing: bool) -> str:
    """The filter sets of an evaluation, spelled out with their sizes."""
    if split == "testing":
        parts = [f"training ({_count(len(dataset.training))})"]
        if filter_validation_when_testing:
            parts.append(f"validation ({_count(len(dataset.validation))})")
        parts.append(f"test ({_count(len(dataset.testing))}, the evaluation triples)")
    else:
        parts = [f"training ({_count(len(dataset.training))})",
                 f"validation ({_count(len(dataset.validation))}, the evaluation triples)"]
    return " + ".join(parts)


def _protocol_lines(results, dataset, split: str, filter_validation_when_testing: bool, whitelist) -> list[str]:
    p = results.protocol or {}
    split_word = "test" if split == "testing" else "validation"
    lines = [
        f"evaluation: {split_word} split, {_count(p.get('num_evaluated_triples', p.get('num_triples', 0)))} triples, "
        f"sides {' + '.join(p.get('sides', []))} ({_count(p.get('num_tasks', 0))} ranking tasks), "
        + (f"the {len(whitelist['entities'])} whitelisted entities as candidates" if whitelist.get("entities")
         else f"all {_count(dataset.num_entities)} entities as candidates"),
        f"filtered: {describe_filtering(dataset, split, filter_validation_when_testing)}",
        "rank type: realistic (mean of optimistic and pessimistic ranks: ties count half)",
    ]
    if whitelist.get("relations") or whitelist.get("entities"):
        r = whitelist.get("relations")
        e = whitelist.get("entities")
        lines.append(
            "whitelist: " + ", ".join(x for x in [f"{len(r)} relations" if r else "", f"{len(e)} entities" if e else ""] if x)
        )
    return lines


#: The headline metrics of the workflow commands: (label, metric key).
HEADLINE_METRICS = (
    ("MRR", "inverse_harmonic_mean_rank"),
    ("Hits@1", "hits_at_1"),
    ("Hits@3", "hits_at_3"),
    ("Hits@10", "hits_at_10"),
    ("MR", "arithmetic_mean_rank"),
    ("AMRI", "adjusted_arithmetic_mean_rank_index"),
    ("adjusted MRR", "adjusted_inverse_harmonic_mean_rank"),
    ("z-MRR", "z_inverse_harmonic_mean_rank"),
)


def headline_table(results, rank_type: str = "realistic") -> str:
    """Headline metrics, one row each, one column per side (``-`` where unavailable)."""
    sides = list(results.sides)
    rows = []
    for label, key in HEADLINE_METRICS:
        cells = []
        for side in sides:
            try:
                v = results.get_metric(f"{side}.{rank_type}.{key}")
                cells.append(f"{v:.4f}" if abs(v) < 1e5 else f"{v:.4g}")
            except KGEvalError:
                cells.append("-")
        rows.append((f"{label} ({key})", cells))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'metric':<{width}}  " + "  ".join(f"{s:>8}" for s in sides)]
    lines.append("-" * len(lines[0]))
    lines += [f"{k:<{width}}  " + "  ".join(f"{c:>8}" for c in cells) for k, cells in rows]
    return "\n".join(lines)


def _metrics_payload(results) -> dict:
    headline = {}
    for side in results.sides:
        for _, name in HEADLINE_METRICS:
            key = f"{side}.realistic.{name}"
            try:
                headline[key] = results.get_metric(key)
            except KGEvalError:
                continue
    return headline


def _default_output(dataset: str, model: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("kgeval-output") / f"{str(dataset).lower().replace('/', '_')}-{model.lower()}-{stamp}"
    path, i = base, 1
    while path.exists():
        path = base.with_name(f"{base.name}-{i}")
        i += 1
    return path


# ---------------------------------------------------------------------------- pipeline
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
@click.option("--data-dir", type=click.Path(file_okay=False), help="Where large datasets live (else $KGEVAL_DATA).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--threads", type=click.IntRange(min=1), help="torch CPU threads [default: 1 for small graphs].")
@click.option("--progress/--no-progress", default=False, show_default=True, help="Show progress bars (stderr).")
@_clean_errors
def pipeline_command(dataset, model, epochs, dim, lr, batch_size, num_negatives, loop, seed, output, early_stopping, patience,
                     frequency, relation_whitelist, entity_whitelist, no_filter_validation, data_dir, fmt, threads,
                     progress):
    """Train MODEL on DATASET, evaluate on test and save everything to an output directory.

    Example: kgeval pipeline --dataset nations --model complex
    """
    from .data import get_dataset
    from .models import model_names
    from .errors import unknown_name
    from .pipeline import pipeline

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
        evaluation_relation_whitelist=_split_list(relation_whitelist),
        evaluation_entity_whitelist=_split_list(entity_whitelist),
        filter_validation_when_testing=not no_filter_validation,
        random_seed=seed, progress=progress, num_threads=threads,
    )
    saved = result.save(out_dir)
    cfg = result.configuration
    if fmt == "json":
        click.echo(json.dumps({
            "dataset": ds.name, "model": cfg["model"], "metrics": _metrics_payload(result.results),
            "timings": result.timings, "epochs_run": result.training.epochs_run,
            "configuration": cfg, "protocol": result.results.protocol, "output": str(saved),
        }, indent=2, default=str))
        return
    tr = result.training
    click.echo(f"{cfg['model']} on {ds.name} ({_count(ds.num_entities)} entities, {_count(ds.num_relations)} relations)")
    click.echo(
        f"training: {tr.epochs_run} epochs ({cfg['training_loop']}, dim {cfg['model_kwargs'].get('dim')}, "
        f"lr {cfg['optimizer_kwargs'].get('lr')}, seed {cfg['random_seed']})"
        + (f", stopped early at best epoch {tr.best_epoch}" if tr.stopped_early else "")
        + f", {result.timings['training']:.1f} s"
        + (f"; final loss {tr.losses[-1]:.4f}" if tr.losses else "")
    )
    for line in _protocol_lines(result.results, ds, "testing", not no_filter_validation,
                                {"relations": cfg["evaluation_relation_whitelist"],
                                 "entities": cfg["evaluation_entity_whitelist"]}):
        click.echo(line)
    click.echo("")
    click.echo(headline_table(result.results))
    click.echo("")
    click.echo(f"wrote {saved} (config.json, results.json, rank_table.npz, model.pt, losses.json)")


# ---------------------------------------------------------------------------- evaluate
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
@click.option("--data-dir", type=click.Path(file_okay=False), help="Where large datasets live (else $KGEVAL_DATA).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@_clean_errors
def evaluate_command(model_file, dataset, split, relation_whitelist, entity_whitelist, no_filter_validation, output,
                     data_dir, fmt):
    """Re-evaluate a saved model on a split, with the pipeline's filtering rules."""
    from .data import get_dataset
    from .models import load_model
    from .pipeline import evaluate_model, load_output

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
    rel = _split_list(relation_whitelist) if relation_whitelist else cfg.get("evaluation_relation_whitelist")
    ent = _split_list(entity_whitelist) if entity_whitelist else cfg.get("evaluation_entity_whitelist")
    results = evaluate_model(model, ds, split=split, filter_validation_when_testing=filter_valid,
                             evaluation_relation_whitelist=rel, evaluation_entity_whitelist=ent, progress=False)
    if output:
        results.save_json(output)
    split_name = "testing" if split == "test" else "validation"
    if fmt == "json":
        click.echo(json.dumps({"dataset": ds.name, "split": split, "metrics": _metrics_payload(results),
                               "protocol": results.protocol}, indent=2, default=str))
        return
    click.echo(f"{getattr(model, 'name', type(model).__name__)} from {model_file} on {ds.name}")
    for line in _protocol_lines(results, ds, split_name, filter_valid, {"relations": rel, "entities": ent}):
        click.echo(line)
    click.echo("")
    click.echo(headline_table(results))


# ---------------------------------------------------------------------------- datasets
@click.command("datasets")
@click.argument("name", required=False)
@click.option("--data-dir", type=click.Path(file_okay=False), help="Where large datasets live (else $KGEVAL_DATA).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@_clean_errors
def datasets_command(name, data_dir, fmt):
    """List the known datasets with their published statistics and availability.

    With NAME, load that dataset and show its statistics (including triples whose
    entities never occur in training).
    """
    from .data import DATASETS, data_dirs, dataset_available, get_dataset

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
    cells = [[r["name"]] + [_count(r[h]) for h in header[1:6]] + [r["available"]] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    fmt_row = lambda row: "  ".join(c.ljust(w) if i in (0, 6) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))  # noqa: E731
    click.echo(fmt_row(header))
    click.echo("-" * len(fmt_row(header)))
    for c in cells:
        click.echo(fmt_row(c))
    dirs = ", ".join(str(d) for d in data_dirs(data_dir))
    click.echo("")
    click.echo(f"large datasets are read from <dir>/<Name>/{{train,valid,test}}.txt in: {dirs} "
               f"(set KGEVAL_DATA, a colon-separated list, to change)")


# ---------------------------------------------------------------------------- hpo
@click.command("hpo")
@click.option("--dataset", "-d", required=True, help="Dataset name or directory.")
@click.option("--model", "-m", required=True, help="Model name.")
@click.option("--trials", type=click.IntRange(min=1), default=10, show_default=True, help="Trials to run now.")
@click.option("--epochs", type=click.IntRange(min=1), help="Training epochs per trial [default: per model].")
@click.option("--sampler", type=click.Choice(["tpe", "random", "grid"]), default="tpe", show_default=True)
@click.option("--pruner", type=click.Choice(["median", "none"]), default="median", show_default=True)
@click.option("--storage", help="Optuna storage URL [default: sqlite:///<output or cwd>/kgeval-hpo.db].")
@click.option("--study-name", help="Study name [default: <dataset>-<model>]; an existing study is resumed.")
@click.option("--metric", default="both.realistic.inverse_harmonic_mean_rank", show_default=True,
              help="Validation metric to optimise.")
@click.option("--search-space", type=click.Path(exists=True, dir_okay=False), help="JSON file with a search space.")
@click.option("--output", "-o", type=click.Path(file_okay=False), help="Write best_pipeline_config.json and trials.json here.")
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Stop starting trials after this many seconds.")
@click.option("--data-dir", type=click.Path(file_okay=False), help="Where large datasets live (else $KGEVAL_DATA).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@_clean_errors
def hpo_command(dataset, model, trials, epochs, sampler, pruner, storage, study_name, metric, search_space, output,
                seed, timeout, data_dir, fmt):
    """Search hyper-parameters on the validation split (the test split is never read)."""
    from .hpo import hpo_pipeline

    space = None
    if search_space:
        try:
            space = json.loads(Path(search_space).read_text())
        except ValueError as exc:
            raise InvalidInputError(f"{search_space}: not valid JSON ({exc})") from None
    res = hpo_pipeline(dataset=dataset, model=model, n_trials=trials, epochs=epochs, sampler=sampler, pruner=pruner,
                       storage=storage, study_name=study_name, metric=metric, search_space=space,
                       output_dir=output, random_seed=seed, timeout=timeout, data_dir=data_dir)
    states: dict[str, int] = {}
    for t in res.study.trials:
        states[t.state.name.lower()] = states.get(t.state.name.lower(), 0) + 1
    if fmt == "json":
        click.echo(json.dumps({"study_name": res.study_name, "storage": res.storage, "metric": res.metric,
                               "direction": res.direction, "best_value": res.best_value,
                               "best_params": res.best_params, "trials": states,
                               "pipeline": res.best_pipeline_kwargs()}, indent=2, default=str))
        return
    click.echo(f"study {res.study_name!r} in {res.storage}: " + ", ".join(f"{n} {s}" for s, n in states.items()))
    click.echo(f"best validation {res.metric} ({res.direction}): {res.best_value:.4f} (trial {res.best_trial.number})")
    for k, v in res.best_params.items():
        click.echo(f"  {k} = {v}")
    click.echo(f"resume: run again with --storage {res.storage} --study-name {res.study_name}")
    command = _pipeline_command_for(res.best_pipeline_kwargs(), res.best_params)
    if command:
        click.echo(f"test the best configuration: {command}")
    else:
        click.echo("test the best configuration: kgeval.pipeline(**result.best_pipeline_kwargs())"
                   + (f" (saved in {output}/best_pipeline_config.json)" if output else ""))


_PARAM_OPTIONS = {"model.dim": "--dim", "optimizer.lr": "--lr", "training.batch_size": "--batch-size",
                  "training.num_negatives": "--num-negatives"}


def _pipeline_command_for(cfg: dict, params: dict) -> str | None:
    """The ``kgeval pipeline`` command line re-running a searched configuration, if options can express it."""
    if any(name not in _PARAM_OPTIONS for name in params):
        return None
    parts = ["kgeval pipeline", "--dataset", str(cfg["dataset"]), "--model", cfg["model"], "--epochs", str(cfg["epochs"]),
             "--seed", str(cfg["random_seed"])]
    for name, value in params.items():
        parts += [_PARAM_OPTIONS[name], str(value)]
    return " ".join(parts)


COMMANDS = (pipeline_command, evaluate_command, datasets_command, hpo_command)


def register(group: click.Group) -> None:
    """Add the workflow commands to ``group`` (the ``kgeval`` click group)."""
    for command in COMMANDS:
        group.add_command(command)
