"""Models trained elsewhere, evaluated and saved as kgeval run directories.

The readers and converters are in :mod:`kgeval.interop` (embedding files, LibKGE checkpoints,
PyKEEN pipeline directories); this module turns what they load into a kgeval run: evaluated
with the pipeline's filtering and, with ``output``, saved as a normal run directory
(``config.json``, ``results.json``, ``rank_table.npz``, ``model.pt``, ...) that
``evaluate --model-file``, ``report`` and ``compare`` read like a kgeval-trained run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ..interop.external import OUTPUT_REFUSED, ExternalSource, array_spec
from ..interop.pykeen_dir import converted_model, load_dataset_scorer, pykeen_losses
from ..training.loops import TrainingResult
from .config import EvaluationSpec, ModelSpec, PipelineConfig
from .evaluation import evaluate_model
from .pipeline import PipelineResult
from .runs import check_output, save_run

__all__ = ["ImportedRun", "evaluate_external", "evaluate_pykeen_directory", "save_imported_run", "save_pykeen_run"]


@dataclass
class ImportedRun(PipelineResult):
    """A :class:`~kgeval.workflow.pipeline.PipelineResult` of a model trained elsewhere: ``config.json``
    also records ``source``, where the model came from."""

    source: dict[str, Any] = field(default_factory=dict)

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "source": dict(self.source)}


def evaluate_external(source: ExternalSource, dataset, *, split: str = "test", data_dir=None, output=None,
                      filter_validation_when_testing=True, shard: tuple[int, int] | None = None, **evaluate_kwargs):
    """``(Results, dataset, description)`` of embedding files or a LibKGE checkpoint (``source``) evaluated
    on ``dataset``.

    ``output``: also write a kgeval run directory there (not with ``shard``: its ``model.pt`` needs the
    whole entity table); ``shard``: see :func:`kgeval.interop.external.load_external`.
    """
    if output is not None:
        if shard is not None:
            raise InvalidInputError(OUTPUT_REFUSED)
        check_output(output)
    model, ds, what = source.load(dataset, data_dir=data_dir, shard=shard)
    results = evaluate_model(model, ds, split=split, filter_validation_when_testing=filter_validation_when_testing,
                             progress=False, **evaluate_kwargs)
    if output is not None:
        save_imported_run(results, ds, model, output, source=_source_record(source), split=split,
                          filter_validation_when_testing=filter_validation_when_testing)
    return results, ds, what


def _source_record(source: ExternalSource) -> dict:
    """config.json's ``source``: the checkpoint, or the embedding and id files, as absolute paths."""
    if source.libkge_checkpoint:
        return {"library": "libkge", "checkpoint": str(Path(source.libkge_checkpoint).resolve())}
    return {"library": "embeddings", **_file_source("entity", source.entity_embeddings, "--entity-embeddings"),
            **_file_source("relation", source.relation_embeddings, "--relation-embeddings"),
            **{f"{kind}_ids": str(Path(path).resolve()) for kind, path in
               (("entity", source.entity_ids), ("relation", source.relation_ids)) if path is not None}}


def _file_source(kind: str, value, flag: str) -> dict:
    """config.json's record of an embedding file: its absolute path, and the array named with ``FILE:NAME``."""
    path, key = array_spec(value, flag)
    return {kind: str(Path(path).resolve()), **({f"{kind}_array": key} if key is not None else {})}


def evaluate_pykeen_directory(directory, dataset=None, *, trust_pickle: bool = False, split: str = "test",
                              filter_validation_when_testing: bool = True, data_dir=None, output=None,
                              **evaluate_kwargs):
    """``(Results, dataset)``: the PyKEEN model of ``directory`` evaluated on ``dataset``'s ``split``
    with kgeval's pipeline filtering (test: training + validation + test filtered, as PyKEEN's pipeline).

    ``output``: also write a kgeval run directory there (:func:`save_pykeen_run`); checked, and the
    model converted (:func:`kgeval.interop.from_pykeen`), before the evaluation starts.
    """
    if output is not None:
        check_output(output)
    model, scorer, ds = load_dataset_scorer(directory, dataset, trust_pickle=trust_pickle, data_dir=data_dir)
    converted = converted_model(model, scorer) if output is not None else None
    results = evaluate_model(scorer, ds, split=split, filter_validation_when_testing=filter_validation_when_testing,
                             **evaluate_kwargs)
    if output is not None:
        save_pykeen_run(results, ds, converted, output, source=directory, split=split,
                        filter_validation_when_testing=filter_validation_when_testing)
    return results, ds


def save_pykeen_run(results, dataset, model, directory, *, source, split: str = "test",
                    filter_validation_when_testing: bool = True):
    """Write a kgeval run directory (``config.json``, ``results.json``, ``rank_table.npz``, ``model.pt``,
    ``losses.json``, ``manifest.json``) for a PyKEEN model: ``kgeval evaluate --model-file``, ``report``
    and ``compare`` read it like a run kgeval trained. ``model``: the converted kgeval model; the
    results are the PyKEEN model's own ranks. PyKEEN's training losses are copied when present."""
    source = Path(source)
    return save_imported_run(results, dataset, model, directory, split=split, losses=pykeen_losses(source),
                             filter_validation_when_testing=filter_validation_when_testing,
                             source={"library": "pykeen", "directory": str(source.resolve()),
                                     "ranks": "the PyKEEN model's own scores"})


def save_imported_run(results, dataset, model, directory, *, source: dict, split: str,
                      filter_validation_when_testing: bool, losses=()):
    """A kgeval run directory for a model trained elsewhere (``source`` in config.json; ``losses``: its
    training losses where the other library recorded them)."""
    config = PipelineConfig(
        dataset=dataset.name, model=ModelSpec(model.name, {"dim": model.dim, "inverse_relations": model.inverse_relations,
                                                           **model.hparams}),
        evaluation=EvaluationSpec(split=split, filter_validation_when_testing=filter_validation_when_testing))
    losses = [float(x) for x in losses]
    run = ImportedRun(results=results, model=model, training=TrainingResult(losses=losses, epochs_run=len(losses)),
                      timings={}, config=config, dataset=dataset, source=dict(source))
    return save_run(run, directory)
