"""``kgeval evaluate``: re-evaluate a saved model with the pipeline's filtering rules.

A run directory is re-evaluated as it was evaluated when saved: its split, its whitelists, its
validation filtering and its evaluation options (unless overridden by the options here), so
it reproduces the run's ``results.json``.

A run directory is verified against its manifest and the model is evaluated only on the
dataset it was trained on (same label -> id maps and split hashes) unless
``--allow-dataset-mismatch`` is given.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import click

from ..errors import InvalidInputError
from .common import check_no_filter_validation, data_dir_option, echo_wrote, format_option, headline_table, \
    metrics_payload, nonempty_path, protocol_lines, split_list, type_constraints_option
from .grammar import SPLIT, protocol_option, sides_option


@click.command("evaluate")
@click.option("--model-file", type=click.Path(exists=True),
              help="A pipeline output directory or a model.pt file.")
@click.option("--pykeen-dir", type=click.Path(exists=True, file_okay=False),
              help="A PyKEEN pipeline output directory (trained_model.pkl + training_triples/); needs --dataset "
                   "and --trust-pickle.")
@click.option("--trust-pickle", is_flag=True,
              help="Allow loading --pykeen-dir's trained_model.pkl: unpickling runs code stored in the file.")
@click.option("--entity-embeddings", metavar="FILE[:NAME]",
              help="Entity embeddings (.npy/.npz/.pt), rows in the dataset's entity id order (its labels "
                   "sorted, as PyKEEN numbers a factory built from labels) unless --entity-ids names them; needs "
                   "--relation-embeddings, --interaction and --dataset. FILE:NAME takes the array NAME of an "
                   ".npz holding several (or the tensor NAME of a .pt dict); without NAME the file must hold "
                   "one.")
@click.option("--relation-embeddings", metavar="FILE[:NAME]",
              help="Relation embeddings (.npy/.npz/.pt, FILE:NAME as for --entity-embeddings), rows in the "
                   "dataset's relation id order unless --relation-ids names them. 2R rows (R = "
                   "the dataset's relations) mean inverse relations, row r + R the inverse of r (LibKGE's "
                   "layout); PyKEEN stores the inverse of r at 2r + 1: reorder its table to "
                   "concatenate(rel[0::2], rel[1::2]) first.")
@click.option("--entity-ids", type=click.Path(exists=True, dir_okay=False),
              help="The label of each --entity-embeddings row: one label per line (line i = row i), or "
                   "'row<TAB>label' lines (LibKGE's entity_ids.del, PyKEEN's entity_to_id.tsv.gz; .gz is read). "
                   "The rows are put in the dataset's order; every row and every dataset entity must be named "
                   "once (else a named error). Rows in another order are copied into memory in the dataset's "
                   "order. Without it, rows must already be in the dataset's id order.")
@click.option("--relation-ids", type=click.Path(exists=True, dir_okay=False),
              help="The label of each --relation-embeddings row, as --entity-ids; with 2R rows it names the R "
                   "relations, row r + R being the inverse of row r.")
@click.option("--interaction", help="Interaction of the embedding files: complex, distmult, rotate, transe-l1 or "
                                    "transe-l2 (TransE's distance: L1 is PyKEEN's and LibKGE's default). "
                                    "Complex rows: [re | im] or a complex dtype (PyKEEN's raw _embeddings.weight "
                                    "is interleaved re0, im0, re1, ...: save its complex representation instead).")
@click.option("--libkge-checkpoint", type=click.Path(exists=True, dir_okay=False),
              help="A LibKGE checkpoint (checkpoint_best.pt); needs --dataset and --libkge-data.")
@click.option("--libkge-data", type=click.Path(exists=True, file_okay=False),
              help="The LibKGE dataset folder of the checkpoint (entity_ids.del, relation_ids.del).")
@click.option("--dataset", "-d", help="Dataset name or directory [default: the one in the output's config.json].")
@click.option("--split", type=SPLIT,
              help="Split to evaluate on [default: the run's own for a run directory, else test].")
@click.option("--relation-whitelist", help="Comma-separated relation labels or ids [default: as trained].")
@click.option("--entity-whitelist", help="Comma-separated entity labels or ids [default: as trained].")
@click.option("--no-filter-validation", is_flag=True, default=None,
              help="Do not filter validation triples when testing [default: as trained].")
@click.option("--drop-unseen/--keep-unseen", default=None,
              help="With --model-file: drop the split's triples whose entity or relation never occurs in training "
                   "(PyKEEN drops them), or keep them [default: as trained, else keep]. The header says how many.")
@type_constraints_option
@click.option("--entity-types", type=click.Path(exists=True, dir_okay=False),
              help="With --type-constraints train: widen each inferred set to every entity sharing a type with one "
                   "of its entities (entity<TAB>type lines, labels or ids; an entity may have several types).")
@click.option("--allow-dataset-mismatch", is_flag=True,
              help="Evaluate even on a dataset whose labels or splits differ from the training dataset's.")
@click.option("--output", "-o", type=click.Path(), callback=nonempty_path,
              help="Also write the results to a file or a directory: with --model-file a JSON file (an existing one "
                   "is replaced, with a note on stderr); with --pykeen-dir, --entity-embeddings or "
                   "--libkge-checkpoint a new kgeval run directory (absent or empty).")
@click.option("--distributed", type=click.Choice(["tasks", "entities"]),
              help="Under torchrun: split the evaluation over the ranks (output from rank 0 only). tasks: every "
                   "rank holds the model and ranks a share of the tasks (any source); entities: every rank keeps "
                   "only its slice of the entity table (--model-file: read once, then sliced on the CPU; "
                   "--entity-embeddings .npy: memory-mapped, each rank reads its rows; not --pykeen-dir or "
                   "--libkge-checkpoint, whose pickles hold the whole table).")
@click.option("--dist-timeout", type=click.FloatRange(min=1), default=600, show_default=True,
              help="Seconds a rank waits for its peers before the collective fails (with --distributed).")
@protocol_option
@sides_option
@data_dir_option
@format_option()
def command(model_file, pykeen_dir, trust_pickle, entity_embeddings, relation_embeddings, entity_ids, relation_ids,
            interaction,
            libkge_checkpoint, libkge_data, dataset, split, relation_whitelist, entity_whitelist,
            no_filter_validation, drop_unseen, type_constraints, entity_types, allow_dataset_mismatch, output, data_dir,
            fmt, distributed, dist_timeout, protocol, sides):
    """Re-evaluate a saved model on a split, with the pipeline's filtering rules."""
    from ..workflow.evaluation import evaluate_model

    sources = [model_file, pykeen_dir, entity_embeddings or relation_embeddings, libkge_checkpoint]
    if sum(x is not None for x in sources) != 1:
        raise InvalidInputError("give exactly one of --model-file and --pykeen-dir, or --entity-embeddings "
                                "with --relation-embeddings, or --libkge-checkpoint")
    _check_source_options(model_file, pykeen_dir, libkge_checkpoint, interaction=interaction, entity_ids=entity_ids,
                          relation_ids=relation_ids,
                          libkge_data=libkge_data, trust_pickle=trust_pickle,
                          allow_dataset_mismatch=allow_dataset_mismatch, distributed=distributed,
                          drop_unseen=drop_unseen is not None)
    if entity_types is not None and type_constraints != "train":
        raise InvalidInputError("--entity-types widens --type-constraints train only")
    typed = {k: v for k, v in (("type_constraints", type_constraints), ("entity_types", entity_types)) if v is not None}
    replaced = _check_output(output, model_file, pykeen_dir, libkge_checkpoint, distributed)
    leader, shard = _start_distributed(distributed, dist_timeout)
    if model_file is None:
        split = split or "test"
        check_no_filter_validation(no_filter_validation, split)
    if model_file is None and pykeen_dir is None:  # embedding files (sharded with shard) or LibKGE
        from ..interop.external import ExternalSource
        from ..workflow.foreign import evaluate_external

        source = ExternalSource(entity_embeddings, relation_embeddings, interaction, libkge_checkpoint, libkge_data,
                                entity_ids, relation_ids)
        results, ds, what = evaluate_external(
            source, dataset, split=split, data_dir=data_dir, output=output if leader else None, shard=shard,
            filter_validation_when_testing=not no_filter_validation,
            evaluation_relation_whitelist=split_list(relation_whitelist),
            evaluation_entity_whitelist=split_list(entity_whitelist), distributed=distributed, **typed,
            **({} if protocol is None else {"protocol": protocol}), **({} if sides is None else {"sides": sides}))
        if leader:  # every rank holds the same results: one of them reports
            _report(results, ds, split, what, fmt, output)
            if output:
                echo_wrote(output, "a run directory: config.json, results.json, rank_table.npz, model.pt", fmt)
        return
    if pykeen_dir is not None:  # --distributed tasks: the whole PyKEEN model on every rank
        from ..workflow.foreign import evaluate_pykeen_directory

        results, ds = evaluate_pykeen_directory(
            pykeen_dir, dataset, trust_pickle=trust_pickle, split=split, data_dir=data_dir,
            output=output if leader else None, filter_validation_when_testing=not no_filter_validation,
            progress=False, evaluation_relation_whitelist=split_list(relation_whitelist),
            evaluation_entity_whitelist=split_list(entity_whitelist), distributed=distributed, **typed,
            **({} if protocol is None else {"protocol": protocol}), **({} if sides is None else {"sides": sides}))
        if leader:
            _report(results, ds, split, f"PyKEEN model from {pykeen_dir}", fmt, output)
            if output:
                echo_wrote(output, "a run directory: config.json, results.json, rank_table.npz", fmt)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        model, ds, defaults = _load(Path(model_file), dataset, data_dir, allow_dataset_mismatch, shard)
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
    split = split or defaults["split"]
    check_no_filter_validation(no_filter_validation, split)
    filter_valid = defaults["filter_validation_when_testing"] if no_filter_validation is None else not no_filter_validation
    rel = split_list(relation_whitelist) if relation_whitelist else defaults["relations"]
    ent = split_list(entity_whitelist) if entity_whitelist else defaults["entities"]
    options, as_saved = _settings(defaults, protocol, sides)
    results = evaluate_model(model, ds, split=split, filter_validation_when_testing=filter_valid,
                             evaluation_relation_whitelist=rel, evaluation_entity_whitelist=ent, progress=False,
                             distributed=distributed, drop_unseen=drop_unseen, **typed, **options)
    if not leader:  # every rank holds the same results: one of them reports
        return
    if as_saved and not typed and defaults.get("saved") is not None and (split, filter_valid, rel, ent) == (
            defaults["split"], defaults["filter_validation_when_testing"], defaults["relations"], defaults["entities"]) \
            and _unseen_policy(results) == _unseen_policy(defaults["saved"]):
        _warn_if_differs(model_file, defaults["saved"], results)  # evaluated as the run was: the same ranks
    if output:
        results.save_json(output)  # atomic
        if replaced:  # an earlier results file was replaced without a word
            click.echo(f"note: replaced the existing file {output}", err=True)
    _report(results, ds, split, f"{getattr(model, 'name', type(model).__name__)} from {model_file}", fmt, output)
    if output:
        echo_wrote(output, "the results: every metric value, the protocol and the null moments", fmt)


def _check_output(output, model_file, pykeen_dir, libkge_checkpoint, distributed) -> bool:
    """Refuse ``--output`` (and sources ``--distributed entities`` cannot shard) before the (possibly long)
    evaluation, and before the process group (no rank fails alone); whether ``--output`` replaces a file."""
    from ..workflow.runs import check_output_file

    if distributed == "entities":  # refused by name before any rank starts waiting for the others
        from ..interop.external import ENTITIES_REFUSED, OUTPUT_REFUSED

        for flag, given in (("--libkge-checkpoint", libkge_checkpoint), ("--pykeen-dir", pykeen_dir)):
            if given is not None:
                raise InvalidInputError(ENTITIES_REFUSED[flag])
        if output and model_file is None:
            raise InvalidInputError(OUTPUT_REFUSED)
    replaced = False
    if output:
        if model_file is not None:
            run_dir = Path(model_file) if Path(model_file).is_dir() else Path(model_file).parent
            replaced = check_output_file(output, inputs=[run_dir]).exists()  # never one of the run's own files
        else:
            from ..workflow.runs import check_output

            check_output(output)
    return replaced


def _start_distributed(distributed, dist_timeout) -> tuple[bool, tuple[int, int] | None]:
    """Join the process group under ``--distributed``: whether this rank reports, and its entity shard
    (``--distributed entities``: this rank's entity rows only, the whole model is never built)."""
    if not distributed:
        return True, None
    from ..evaluation.distributed import init_from_env

    leader = init_from_env(dist_timeout) == 0
    if distributed != "entities":
        return leader, None
    import torch.distributed as dist

    return leader, (dist.get_rank(), dist.get_world_size())


def _check_source_options(model_file, pykeen_dir, libkge_checkpoint, **given) -> None:
    """Refuse an option the chosen source does not read: it was accepted and ignored (``--model-file RUN
    --interaction complex`` evaluated RUN's own model, not a ComplEx)."""
    source = ("--model-file" if model_file is not None else "--pykeen-dir" if pykeen_dir is not None
              else "--libkge-checkpoint" if libkge_checkpoint is not None else "--entity-embeddings")
    readers = {"interaction": ("--entity-embeddings",), "entity_ids": ("--entity-embeddings",),
               "relation_ids": ("--entity-embeddings",), "libkge_data": ("--libkge-checkpoint",),
               "trust_pickle": ("--pykeen-dir",), "allow_dataset_mismatch": ("--model-file",),
               "drop_unseen": ("--model-file",)}
    for name, sources in readers.items():
        if given[name] and source not in sources:
            flag = "--drop-unseen/--keep-unseen" if name == "drop_unseen" else f"--{name.replace('_', '-')}"
            raise InvalidInputError(f"{flag} applies to {' and '.join(sources)} only, "
                                    f"not to {source}")
    ctx = click.get_current_context()
    if given["distributed"] is None and ctx.get_parameter_source("dist_timeout") not in (
            None, click.core.ParameterSource.DEFAULT):
        raise InvalidInputError("--dist-timeout applies with --distributed only")


def _report(results, ds, split: str, what: str, fmt: str, output=None) -> None:
    if fmt == "json":
        click.echo(json.dumps({"dataset": ds.name, "split": split, "metrics": metrics_payload(results),
                               "protocol": results.protocol, "output": None if output is None else str(output)},
                              indent=2, default=str))
        return
    click.echo(f"{what} on {ds.name}")
    for line in protocol_lines(results, split):
        click.echo(line)
    click.echo("")
    click.echo(headline_table(results))


def _refuse_pykeen_output(path: Path) -> None:
    """A PyKEEN pipeline directory (or its trained_model.pkl) given as --model-file: say to use --pykeen-dir."""
    from ..interop.pykeen_dir import MODEL_FILE

    directory = path if path.is_dir() else path.parent
    if (path.is_dir() and not (path / "config.json").exists() and (path / MODEL_FILE).is_file()) or (
            path.name == MODEL_FILE and not (directory / "config.json").exists()):
        raise InvalidInputError(f"{path} is PyKEEN's pipeline output ({MODEL_FILE}), not a kgeval model: evaluate it "
                                f"with --pykeen-dir {directory} --trust-pickle --dataset NAME")


def _load(path: Path, dataset, data_dir, allow_mismatch: bool, shard=None):
    """The model, the checked dataset and the run's evaluation settings (a run directory or its model.pt;
    defaults for a model file outside a run)."""
    from ..data import get_dataset
    from ..models import load_model
    from ..workflow.runs import check_dataset, check_model_config, load_run

    defaults = {"split": "test", "filter_validation_when_testing": True, "relations": None, "entities": None,
                "options": None}
    _refuse_pykeen_output(path)
    if path.is_dir():
        run = load_run(path)
        saved = _saved_results(run)  # refused here where results.json and the rank table disagree
        model = run.load_model(shard=shard)
        ds = run.load_dataset(model, dataset, data_dir=data_dir, allow_dataset_mismatch=allow_mismatch)
        # another dataset gives other ranks: nothing to compare the re-evaluation with
        saved = None if dataset is not None or allow_mismatch else saved
        return model, ds, {**_run_defaults(run.config), "saved": saved}
    if dataset is None:
        raise InvalidInputError("--dataset is required when --model-file is a model file, not an output directory")
    # a model file inside a run directory is verified and checked against that run's dataset too
    run = load_run(path.parent) if (path.parent / "config.json").exists() else None
    metadata = None if run is None else run.metadata
    model = load_model(path, shard=shard)
    if run is not None and path.name == "model.pt":
        check_model_config(model, run.config, path)
        # the run's model: evaluated as the run was, like its directory (a run evaluated on 2 relations was
        # re-evaluated on all 55 through RUN/model.pt: MRR 0.4575 where RUN gave the run's 0.6337)
        saved = _saved_results(run)
        defaults = {**_run_defaults(run.config), "saved": None if allow_mismatch else saved}
    ds = get_dataset(dataset, data_dir=data_dir)
    check_dataset(model, ds, metadata, allow_mismatch=allow_mismatch)
    return model, ds, defaults


def _saved_results(run):
    """The run's saved results, computed from its rank table and checked against its results.json: a run
    whose files disagree is refused here, as by ``report`` and ``compare`` (None for a run without them)."""
    from ..workflow.run_files import run_results

    if not any((run.directory / f).exists() for f in ("results.json", "rank_table.npz")):
        return None
    return run_results(run)


def _unseen_policy(results):
    """Whether the unseen evaluation triples were kept or dropped (None: not recorded)."""
    unseen = (results.protocol or {}).get("unseen")
    return unseen.get("policy") if isinstance(unseen, dict) else None


def _warn_if_differs(model_file, saved, results) -> None:
    """Say on stderr where a re-evaluation with the run's own settings has other ranks than the run's saved
    rank table: the numbers printed would otherwise differ silently from ``report``'s and ``compare``'s.

    Then model.pt is not the model that produced rank_table.npz (replaced, with the manifest rewritten), or the
    scores differ on this device (a run evaluated on a GPU re-evaluated on the CPU: ties broken otherwise)."""
    import numpy as np

    old, new = saved.rank_table, results.rank_table
    if new is None:
        return
    if len(old) != len(new):
        why = f"{len(new)} ranking tasks here, {len(old)} in the saved rank table"
    else:
        differ = int(np.count_nonzero((old.optimistic != new.optimistic) | (old.pessimistic != new.pessimistic)))
        if not differ:
            return
        key = "both.realistic.inverse_harmonic_mean_rank"
        why = (f"{differ} of {len(new)} ranks differ from the saved rank table (MRR {results.get_metric(key):.4f} "
               f"here, {saved.get_metric(key):.4f} saved)")
    click.echo(f"warning: re-evaluating {model_file} with its own settings: {why}; its model.pt is not the model "
               "that produced its rank_table.npz, or the scores differ on this device", err=True)


def _settings(defaults: dict, protocol, sides) -> tuple[dict, bool]:
    """``(options kwargs, as saved)`` of a model file's evaluation: the run's own options with ``--protocol`` and
    ``--sides`` applied; ``as saved``: neither changes the run's, so its saved ranks must be reproduced (else the
    comparison would be a false alarm)."""
    from ..evaluation.options import as_options

    options = defaults["options"]
    if protocol is not None:  # the preset's options replace the run's (its other options stay)
        options = as_options(options).replace(protocol=protocol)
    if sides is not None:
        options = as_options(options).replace(sides=sides)
    as_saved = protocol is None and (sides is None or options is None or tuple(sides) == tuple(
        as_options(defaults["options"]).sides))
    return ({} if options is None else {"options": options}), as_saved


def _run_defaults(cfg) -> dict:
    """A saved run's evaluation settings: what ``kgeval evaluate`` uses unless its options say otherwise."""
    # its split too: a run evaluated on validation (e.g. a configuration under search, which must never
    # read test) was re-evaluated on test unless --split said otherwise
    return {"split": cfg.evaluation.split,
            "filter_validation_when_testing": cfg.evaluation.filter_validation_when_testing,
            "relations": None if cfg.restriction.relations is None else list(cfg.restriction.relations),
            "entities": None if cfg.restriction.entities is None else list(cfg.restriction.entities),
            # the run's evaluation options (filtered, sides, sampled negatives, tie tolerance, ...):
            # without them a run evaluated with filtered=False was re-evaluated filtered, another number
            # (its device is this machine's: a run evaluated on a GPU re-evaluates on the CPU too)
            "options": cfg.evaluation.options.replace(device=None)}
