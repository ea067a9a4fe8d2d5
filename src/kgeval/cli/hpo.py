"""``kgeval hpo``: hyper-parameter search on the validation split."""

from __future__ import annotations

import json
import sys

import click

from .._json import read_json
from .._validation import check_seed
from ..errors import InvalidInputError
from ..tracking import Trackers
from .common import data_dir_option, format_option, nonempty_path
from .grammar import OPTION_PATHS, progress_enabled, progress_option
from .pipeline import TRACKER_HELP


@click.command("hpo")
@click.option("--dataset", "-d", required=True, help="Dataset name or directory.")
@click.option("--model", "-m", help="Model name [default: the --config file's].")
@click.option("--trials", type=click.IntRange(min=1), default=10, show_default=True, help="Trials to run now.")
@click.option("--epochs", type=click.IntRange(min=1), help="Training epochs per trial [default: per model].")
@click.option("--sampler", type=click.Choice(["tpe", "random", "grid"]), default="tpe", show_default=True,
              help="How trials draw their values: tpe (Optuna's tree-structured Parzen estimator), random, or grid "
                   "(every combination of a search space of value lists).")
@click.option("--pruner", type=click.Choice(["median", "none"]), default="median", show_default=True,
              help="Stop a trial early when its intermediate validation value is worse than the median of earlier "
                   "trials at the same epoch (median), or never (none).")
@click.option("--storage", help="Optuna storage URL [default: sqlite:///<output or cwd>/kgeval-hpo.db].")
@click.option("--study-name", help="Study name [default: <dataset>-<model>]; an existing study is resumed.")
@click.option("--metric", help="Validation metric to optimise [default: MRR, both sides, realistic ranks].")
@click.option("--search-space", type=click.Path(exists=True, dir_okay=False),
              help="JSON file: configuration path -> distribution (e.g. {\"model.dim\": [32, 64]}).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="JSON file with the base pipeline configuration (PipelineConfig.to_dict(), or a run's config.json).")
@click.option("--set", "settings", multiple=True, metavar="PATH=VALUE",
              help="Set one base configuration path, e.g. --set evaluation.options.sides=tail (VALUE is JSON or text).")
@click.option("--output", "-o", type=click.Path(file_okay=False), callback=nonempty_path,
              help="Output directory: best_pipeline_config.json and trials.json are written there (and the "
                   "default storage). One directory per study: a directory holding another study's files (another "
                   "--study-name or --storage, another run's in-memory study such as --storage sqlite://, a study "
                   "made anew in a deleted database) is refused before any trial, unless --overwrite; resuming the "
                   "same study rewrites them.")
@click.option("--overwrite", is_flag=True,
              help="Replace the best_pipeline_config.json and trials.json of another search in --output (they are "
                   "refused otherwise); no study's trials are touched.")
@click.option("--seed", type=int, help="Pipeline seed of every trial, in [0, 2**32) [default: 42]; "
                                       "trial n's sampler is seeded from (seed, n).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Stop starting trials after this many seconds.")
@click.option("--tracker", "trackers", multiple=True, metavar="NAME[=LOCATION]",
              help=TRACKER_HELP.replace("Log the run to", "Log each trial (one run per trial, grouped by study) to"))
@data_dir_option
@format_option()
@progress_option
def command(dataset, model, trials, epochs, sampler, pruner, storage, study_name, metric, search_space, config_file,
            settings, output, overwrite, seed, timeout, data_dir, fmt, trackers, progress):
    """Search hyper-parameters on the validation split (the test split is never read)."""
    from ..results.render import format_value
    from ..workflow.hpo import HPOInterrupted, hpo_pipeline

    if seed is not None:
        check_seed("--seed", seed)  # named as the user typed it, not as random_seed
    space = read_json(search_space, "a JSON search space") if search_space else None
    if search_space and (not isinstance(space, dict) or not space):  # hpo_pipeline would say 'search_space must ...'
        raise InvalidInputError(f"--search-space {search_space}: expected a non-empty JSON object of configuration "
                                f"path -> distribution, e.g. {{\"model.dim\": [32, 64]}}; got {_kind(space)}")
    base = _base_config(config_file, model, settings)
    space = _search_space(space, base, settings, epochs, seed)
    given = {"epochs": epochs, "random_seed": seed, "metric": metric, "trackers": Trackers.from_specs(trackers)}
    try:
        res = hpo_pipeline(base, dataset=dataset, n_trials=trials, sampler=sampler,
                           pruner=pruner, storage=storage, study_name=study_name, search_space=space,
                           output_dir=output, overwrite=overwrite, timeout=timeout, data_dir=data_dir,
                           progress=progress_enabled(progress),  # a header, then a trial counter with the best so far
                           **{k: v for k, v in given.items() if v is not None})
    except HPOInterrupted as stop:  # Ctrl-C: the study is kept; say how to go on
        click.echo(str(stop), err=True)
        sys.exit(130)
    states: dict[str, int] = {}
    for t in res.study.trials:
        states[t.state.name.lower()] = states.get(t.state.name.lower(), 0) + 1
    best = res.summary()  # one trial: another worker may finish a better one while this prints
    if fmt == "json":
        click.echo(json.dumps({"study_name": res.study_name, "storage": res.shown_storage, "metric": res.metric,
                               "direction": res.direction, "best_trial": best["best_trial"],
                               "best_value": best["best_value"], "best_params": best["best_params"],
                               "trials": states, "pipeline": best["pipeline"], "notes": list(res.notes),
                               "output": None if output is None else str(output)},
                              indent=2, default=str))
        return
    click.echo(f"study {res.study_name!r} in {res.shown_storage}: " + ", ".join(f"{n} {s}" for s, n in states.items()))
    for note in res.notes:  # found when the study was opened: a running trial may be a dead worker's
        click.echo(f"  when the study was opened: {note}")
    click.echo(f"best validation {res.metric} ({res.direction}): {format_value(best['best_value'])} "
               f"(trial {best['best_trial']})")
    for k, v in best["best_params"].items():
        click.echo(f"  {k} = {v}")
    click.echo(res.resume_hint())
    if output:
        click.echo(f"wrote {output} (best_pipeline_config.json, trials.json)")
    # the pipeline command's options cannot express a --config / --set base configuration
    command_line = None if config_file or settings else _pipeline_command_for(best["pipeline"],
                                                                              best["best_params"])
    if command_line:
        click.echo(f"test the best configuration: {command_line}")
    else:
        click.echo("test the best configuration: kgeval.pipeline(result.best_config)"
                   + (f" (its 'config' is saved in {output}/best_pipeline_config.json)" if output else ""))


def _kind(value) -> str:
    """How a JSON value is called in JSON's own words (an error message's 'got ...')."""
    if value == {}:
        return "an empty object"
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else f"a JSON {names.get(type(value), type(value).__name__)}"


def _search_space(space, base, settings: tuple[str, ...], epochs, seed):
    """The --search-space, refused where it searches a value fixed by --set, --epochs or --seed (every trial
    would replace it); without one, the default space less the --set paths (hpo_pipeline's default)."""
    from ..workflow.hpo import refuse_fixed_and_searched
    from ..workflow.search_space import default_search_space, normalize_space

    fixed = {item.partition("=")[0].strip(): "fixed with --set" for item in settings}
    fixed.update({path: f"fixed with {option}" for path, option, value in
                  (("training.epochs", "--epochs", epochs), ("seed", "--seed", seed)) if value is not None})
    if space is None:
        if not settings or base.model is None:  # no model: hpo_pipeline names that
            return None
        space = {k: v for k, v in default_search_space(base.resolve().training.loop).items() if k not in fixed}
    refuse_fixed_and_searched(normalize_space(space), fixed)
    return space


_PARAM_OPTIONS = {path: "--" + name.replace("_", "-") for name, path in OPTION_PATHS.items()}


def _pipeline_command_for(cfg: dict, params: dict) -> str | None:
    """The ``kgeval pipeline`` command line re-running a searched configuration, if options can express it."""
    from ..training.stopping import DEFAULT_METRIC, metric_increasing
    from ..workflow.hpo import _canonical_metric

    if any(name not in _PARAM_OPTIONS for name in params):
        return None
    stopping = cfg.get("stopper_kwargs") or {}
    stop_metric = stopping.get("metric")
    larger = stopping.get("larger_is_better")
    if larger is not None and larger != metric_increasing(stop_metric or DEFAULT_METRIC):
        return None  # a direction that is not the metric's own: no option sets it
    parts = ["kgeval pipeline", "--dataset", str(cfg["dataset"]), "--model", cfg["model"], "--epochs", str(cfg["epochs"]),
             "--seed", str(cfg["random_seed"])]
    if any(name.startswith("early_stopping.") for name in params):  # the space made the trials stop early
        parts.append("--early-stopping")
        if (stop_metric is not None and "early_stopping.metric" not in params
                and _canonical_metric(stop_metric) != _canonical_metric(DEFAULT_METRIC)):
            parts += ["--stopping-metric", str(stop_metric)]  # the trials stopped on the search's metric
    for name, value in params.items():
        parts += [_PARAM_OPTIONS[name], str(value)]
    return " ".join(parts)


def _base_config(config_file: str | None, model: str | None, settings: tuple[str, ...]):
    """The --config file's configuration (a run's config.json works too) with --model and the --set paths applied."""
    from ..workflow import PipelineConfig

    data = read_json(config_file, "a JSON configuration") if config_file else {}
    if isinstance(data, dict) and isinstance(data.get("configuration"), dict):  # a saved run's config.json
        data = data["configuration"]
    paths = {} if model is None else {"model.name": model}
    for item in settings:
        path, sep, text = item.partition("=")
        if not sep or not path.strip():
            raise InvalidInputError(f"--set {item!r}: expected PATH=VALUE, e.g. --set training.batch_size=128")
        try:
            paths[path.strip()] = json.loads(text)
        except ValueError:
            paths[path.strip()] = text  # plain text, e.g. --set evaluation.options.sides=tail
        except RecursionError:  # '[' x 100000: a traceback from the parser
            raise InvalidInputError(f"--set {path.strip()}: the value is nested too deeply") from None
    return (PipelineConfig.from_dict(data) if config_file else PipelineConfig()).with_paths(paths)
