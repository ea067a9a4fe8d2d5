"""``kgeval pipeline``: train a model, evaluate it on test and save the run.

The options build a :class:`~kgeval.workflow.PipelineConfig` through :data:`~.grammar.OPTION_PATHS`
(option -> configuration path). The output directory is checked before training. The metrics
are printed before the run is saved (``--format json``: once, after), and replicates are saved
as each finishes; if saving still fails (a full disk), the error line names the file and the
reason and the run is saved to a temporary directory instead, named in that line.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path

import click

from .._validation import check_seed
from ..errors import InvalidInputError, KGEvalError
from ..tracking import Trackers
from .common import count, data_dir_option, echo_above_progress, format_option, headline_table, metrics_payload, \
    nonempty_path, protocol_lines, split_list, type_constraints_option
from .grammar import OPTION_PATHS, progress_enabled, progress_option, protocol_option, sides_option

#: the help of --tracker (kgeval hpo has the same option)
TRACKER_HELP = ("Log the run to an experiment tracker: mlflow, wandb, tensorboard or csv; repeatable. LOCATION: "
                "MLflow's tracking URI (default MLFLOW_TRACKING_URI, else sqlite:///mlflow.db), else the directory "
                "to write to (defaults: W&B's WANDB_DIR or ., ./runs, ./kgeval-tracking). Needs the tracker's "
                "package: pip install -e \".[mlflow]\" (or .[wandb], .[tensorboard]).")


@click.command("pipeline")
@click.option("--dataset", "-d", required=True, help="Dataset name (nations, kinships, umls, fb15k-237, ...) or directory.")
@click.option("--model", "-m", required=True, help="Model name (complex, distmult, transe, rotate, tucker, pairre), or a non-trained baseline (rule, marginal, popularity).")
@click.option("--epochs", type=click.IntRange(min=1), help="Training epochs [default: per model].")
@click.option("--dim", type=click.IntRange(min=1), help="Embedding dimension [default: per model].")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), help="Learning rate [default: per model].")
@click.option("--batch-size", type=click.IntRange(min=1), help="Training batch size [default: per model].")
@click.option("--num-negatives", type=click.IntRange(min=1), help="Negatives per triple (sLCWA) [default: per model].")
@click.option("--loop", type=click.Choice(["lcwa", "slcwa"]), help="Training loop [default: per model].")
@click.option("--seed", type=int, default=42, show_default=True, help="Random seed, in [0, 2**32).")
@click.option("--output", "-o", type=click.Path(), callback=nonempty_path,
              help="Output directory [default: ./kgeval-output/<dataset>-<model>-seed<seed>-<time>-<suffix>].")
@click.option("--early-stopping", is_flag=True,
              help="Stop on the validation MRR, or --stopping-metric (filtered with train + valid).")
@click.option("--stopping-metric",
              help="Early stopping: the validation metric to stop on, e.g. hits@10 or mr (its direction follows) "
                   "[default: mrr].")
@click.option("--patience", type=click.IntRange(min=1), help="Early stopping: evaluations without improvement.")
@click.option("--frequency", type=click.IntRange(min=1), help="Early stopping: evaluate every N epochs.")
@click.option("--filtered-with-test", type=click.Choice(["record", "select"]),
              help="Early stopping: also compute the validation metric filtered with the test triples too (one more "
                   "evaluation pass each time) and record it, or select the model by it (as LibKGE).")
@click.option("--relation-whitelist", help="Comma-separated relation labels or ids to evaluate on.")
@click.option("--entity-whitelist", help="Comma-separated entity labels or ids (triples and candidates).")
@click.option("--no-filter-validation", is_flag=True, help="Do not filter validation triples when testing.")
@click.option("--drop-unseen/--keep-unseen", default=None,
              help="Drop evaluation triples whose entity or relation never occurs in training (PyKEEN drops "
                   "them; the vocabulary is then the training split's), or keep them, ranked with embeddings "
                   "training never updated. Either way the header says how many there are. [default: keep; "
                   "drop under --protocol pykeen]")
@protocol_option
@sides_option
@type_constraints_option
@data_dir_option
@format_option()
@click.option("--threads", type=click.IntRange(min=1, max=1024),
              help="CPU threads of torch, 1..1024 [default: 1 for small graphs].")
@click.option("--replicates", type=click.IntRange(min=2),
              help="Train K times with seeds seed, seed+1, ...; save each run in OUTPUT/seed<s> and a summary "
                   "across seeds (mean, sd, t-based 95% CI) in OUTPUT/replicates.json.")
@progress_option
@click.option("--tracker", "trackers", multiple=True, metavar="NAME[=LOCATION]", help=TRACKER_HELP)
def command(dataset, model, early_stopping, relation_whitelist, entity_whitelist, no_filter_validation, drop_unseen,
            type_constraints, output, data_dir, fmt, progress, replicates, trackers, protocol, sides, **options):
    """Train MODEL on DATASET, evaluate on test and save everything to an output directory.

    Example: kgeval pipeline --dataset nations --model complex
    """
    from ..data import get_dataset

    check_seed("--seed", options.get("seed"))  # named as the user typed it
    progress = progress_enabled(progress)
    from ..workflow import PipelineConfig
    from ..workflow.pipeline import pipeline
    from ..workflow.runs import check_output, default_run_name

    given = [f"--{name.replace('_', '-')}" for name in ("patience", "frequency", "stopping_metric", "filtered_with_test")
             if options[name]]
    if given and not early_stopping:
        raise InvalidInputError(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} --early-stopping")
    paths = {"dataset": str(dataset), "model.name": model, "early_stopping": {} if early_stopping else None,
             "restriction.relations": split_list(relation_whitelist),
             "restriction.entities": split_list(entity_whitelist),
             "evaluation.filter_validation_when_testing": not no_filter_validation}
    if drop_unseen is None:
        from ..presets import get as get_preset

        drop_unseen = protocol is not None and get_preset(protocol).drop_unseen
    paths["drop_unseen"] = drop_unseen
    if protocol is not None:
        paths["evaluation.options.protocol"] = protocol
    if sides is not None:
        paths["evaluation.options.sides"] = list(sides)
    if type_constraints is not None:  # an evaluation option of the configuration, saved with the run
        paths["evaluation.options.type_constraints"] = type_constraints
    paths.update({OPTION_PATHS[name]: value for name, value in options.items() if value is not None})
    config = PipelineConfig().with_paths(paths)  # validates model name, seed, ... before any loading
    ds = get_dataset(dataset, data_dir=data_dir, drop_unseen=drop_unseen)
    out_dir = check_output(output or Path("kgeval-output") / default_run_name(ds.name, model, config.seed))
    # made before training: a missing package or an unreachable server is one error now
    group = Trackers.from_specs(trackers, name=None if replicates else out_dir.name,
                                group=out_dir.name if replicates else None)
    if progress:  # what will run, on what, under which protocol: before the work, on stderr
        _header(config, ds, out_dir, replicates)
    if replicates is not None:
        _replicates(config, replicates, ds, out_dir, fmt, progress, group)
        return
    with group or contextlib.nullcontext():  # the tracker run ends here, with the run directory logged
        result = pipeline(config, dataset=ds, progress=progress, trackers=group)
        if fmt != "json":  # the metrics reach the screen before anything can go wrong while saving
            _report(result, ds, fmt)
        saved, failure = _save(result, out_dir)
        if group is not None and saved is not None:
            group.log_artifact(saved, "run")
    if fmt == "json":
        _report(result, ds, fmt, saved)
    elif saved is not None:
        click.echo(f"wrote {saved} (config.json, results.json, rank_table.npz, model.pt, losses.json, manifest.json)")
    if failure:
        raise failure


def _selection_line(tr) -> str:
    """Which validation value selected the model, and the other filter's value at that epoch where recorded."""
    line = f"model selected by {tr.selected_by}"
    best = next((r for r in tr.records if r["epoch"] == tr.best_epoch), None)
    if best is not None and best["filtered_with_test"] is not None:
        line += (f": at epoch {tr.best_epoch} {best['filtered']:.4f} filtered, "
                 f"{best['filtered_with_test']:.4f} filtered with test")
    return line


def _header(config, ds, out_dir: Path, replicates: int | None) -> None:
    """The lines printed before training starts (stderr: stdout stays the results)."""
    ev = config.evaluation
    filters = "training + validation + test" if ev.filter_validation_when_testing else "training + test"
    preset = ev.options.protocol
    if preset != "kgeval":
        filters += f" (protocol preset {preset})"
    runs = f"{replicates} replicates (seeds {config.seed}..{config.seed + replicates - 1})" if replicates else \
        f"seed {config.seed}"
    click.echo(f"kgeval pipeline: {config.model.name} on {ds.name} ({count(ds.num_entities)} entities, "
               f"{count(ds.num_relations)} relations, {count(len(ds.training))} training triples), {runs}", err=True)
    click.echo(f"then: evaluate on the test split ({count(len(ds.testing))} triples, both sides), filtered with "
               f"{filters}; unseen entities {'dropped' if config.drop_unseen else 'kept'}; output {out_dir}", err=True)


def _save(run, out_dir: Path) -> tuple[Path | None, KGEvalError | None]:
    """Save a run; if that fails, save it to a new temporary directory and say so in one line.

    Returns where it was saved (None: nowhere) and the error to raise after the output is printed.
    """
    from ..workflow.runs import OutputDirectoryError

    try:
        return run.save(out_dir), None
    except Exception as exc:  # whatever failed, the trained model must not be lost without a word
        if isinstance(exc, OutputDirectoryError) and exc.saved_to is not None:
            return exc.saved_to, exc
        return _fallback(run, exc, out_dir)


def _fallback(run, exc: Exception, out_dir: Path) -> tuple[Path | None, KGEvalError]:
    """Save ``run``, which could not be saved to ``out_dir`` (``exc``), to a new temporary directory."""
    import shutil

    from .._json import os_cause
    from ..workflow.runs import OutputDirectoryError

    # kgeval's save errors name the file and the reason; anything else gets them here
    first = str(exc) if isinstance(exc, KGEvalError) else f"cannot save the run to {out_dir}: {os_cause(exc)}"
    lost = "the trained model is lost, the metrics printed are its only record"
    try:
        fallback = Path(tempfile.mkdtemp(prefix="kgeval-run-"))
    except OSError as second:
        return None, OutputDirectoryError(f"{first}; no temporary directory for it either ({second.strerror}): {lost}")
    try:
        run.save(fallback)
    except Exception as second:
        shutil.rmtree(fallback, ignore_errors=True)
        return None, OutputDirectoryError(f"{first}; saving it to {fallback} failed too ({os_cause(second)}): {lost}")
    return fallback, OutputDirectoryError(f"{first}; the run was saved to {fallback} instead")


def _replicates(config, k: int, ds, out_dir: Path, fmt: str, progress: bool, trackers=None) -> None:
    """Train ``k`` replicates, printing each one's metrics and saving it in ``out_dir/seed<s>`` as it finishes,
    then the summary across seeds. A failed save stops the set (the replicates saved before it stay, the
    failed one goes to a temporary directory) and the summary covers the replicates trained."""
    from ..results.render import format_value
    from ..workflow.pipeline import replicates
    from ..workflow.replicates import ReplicateSaveError, ReplicatesResult

    def on_run(seed, run):  # progress: the workflow's counter of replicates shows the best MRR so far
        if fmt != "json":
            echo_above_progress(f"seed {seed}: " + ", ".join(f"{label} {format_value(run.results.get_metric(name))}"
                                                             for label, name in _REPLICATE_LINE))
    try:
        result = replicates(config, k, dataset=ds, progress=progress, output=out_dir, on_run=on_run, trackers=trackers)
    except ReplicateSaveError as exc:
        saved, failure = _fallback(exc.runs[-1], exc, out_dir)
        if saved is not None:
            failure = type(failure)(f"{exc}; seed {exc.seeds[-1]} was saved to {saved} instead")
        if len(exc.runs) >= 2:  # a summary needs two runs
            _replicates_report(ReplicatesResult(exc.runs, exc.seeds), ds, None, fmt, error=str(failure))
        elif fmt == "json":
            click.echo(json.dumps({"dataset": ds.name, "model": config.model.name, "error": str(failure),
                                   "metrics": metrics_payload(exc.runs[0].results)}, indent=2, default=str))
        raise failure from None
    _replicates_report(result, ds, out_dir, fmt)


#: the one line printed per replicate as it finishes (both sides, realistic ranks)
_REPLICATE_LINE = (("MRR", "both.realistic.inverse_harmonic_mean_rank"), ("Hits@1", "both.realistic.hits_at_1"),
                   ("Hits@10", "both.realistic.hits_at_10"))


def _replicates_report(result, ds, saved: Path | None, fmt: str, error: str | None = None) -> None:
    if fmt == "json":
        click.echo(json.dumps({"dataset": ds.name, "model": result.runs[0].config.model.name,
                               **result.to_json(), "output": None if saved is None else str(saved),
                               **({} if error is None else {"error": error})}, indent=2, default=str))
        return
    click.echo(f"{result.runs[0].config.model.name} on {ds.name}")
    for line in protocol_lines(result.runs[0].results, "test"):
        click.echo(line)
    click.echo("")
    click.echo(result.summary_table())
    click.echo("")
    if saved is not None:
        click.echo(f"wrote {saved} ({len(result.runs)} run directories seed<s>/ and replicates.json)")


def _report(result, ds, fmt: str, saved: Path | None = None) -> None:
    cfg = result.config
    if fmt == "json":
        click.echo(json.dumps({
            "dataset": ds.name, "model": cfg.model.name, "metrics": metrics_payload(result.results),
            "timings": result.timings, "epochs_run": result.training.epochs_run,
            "best_epoch": result.training.best_epoch, "selected_by": result.training.selected_by,
            "validation_records": result.training.records or None,
            "configuration": cfg.to_dict(), "protocol": result.results.protocol,
            "output": None if saved is None else str(saved),
        }, indent=2, default=str))
        return
    tr = result.training
    click.echo(f"{cfg.model.name} on {ds.name} ({count(ds.num_entities)} entities, {count(ds.num_relations)} relations)")
    if not getattr(result.model, "trainable", True):  # a baseline: its training settings were never used
        options = ", ".join(f"{k} {v}" for k, v in cfg.model.options.items())
        click.echo(f"training: none, the {cfg.model.name} baseline counted on the training split"
                   + (f" ({options})" if options else "") + f", {result.timings['training']:.1f} s")
    else:
        _echo_training(cfg, tr, result)
    for line in protocol_lines(result.results, "test"):
        click.echo(line)
    click.echo("")
    click.echo(headline_table(result.results))
    click.echo("")


def _echo_training(cfg, tr, result) -> None:
    click.echo(
        f"training: {tr.epochs_run} epochs ({cfg.training.loop}, dim {cfg.model.options.get('dim')}, "
        f"lr {cfg.optimizer.lr}, seed {cfg.seed})"
        + (f", stopped early at best epoch {tr.best_epoch}" if tr.stopped_early else "")
        # early stopping restores its best checkpoint even when it ran every epoch: say whose numbers these are
        + (f", evaluated the best validation checkpoint (epoch {tr.best_epoch})"
           if not tr.stopped_early and tr.best_epoch is not None and tr.best_epoch != tr.epochs_run else "")
        + f", {result.timings['training']:.1f} s"
        + (f"; final loss {tr.losses[-1]:.4f}" if tr.losses else "")
    )
    if tr.selected_by is not None:
        click.echo(_selection_line(tr))
