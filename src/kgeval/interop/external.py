"""``kgeval evaluate`` for models trained elsewhere: plain embedding files and LibKGE checkpoints.

Both become kgeval models with the dataset's ids (:func:`kgeval.models.from_embeddings`,
:func:`kgeval.interop.libkge.load_libkge`), are evaluated with the pipeline's filtering and,
with ``output``, saved as a normal kgeval run directory (``config.json``, ``results.json``,
``rank_table.npz``, ``model.pt``, ...) that ``evaluate --model-file``, ``report`` and
``compare`` read like a kgeval-trained run.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidInputError


def load_external(entity_embeddings, relation_embeddings, interaction, libkge_checkpoint, libkge_data, dataset,
                  *, data_dir=None):
    """``(model, dataset, description)`` of one external source (embedding files or a LibKGE checkpoint)."""
    from ..data import get_dataset
    from ..models.embeddings import from_embeddings, load_array

    if dataset is None:
        raise InvalidInputError("--dataset is required with --entity-embeddings or --libkge-checkpoint")
    ds = get_dataset(dataset, data_dir=data_dir)
    if libkge_checkpoint is not None:
        from .libkge import load_libkge

        return load_libkge(libkge_checkpoint, ds, data_dir=libkge_data), ds, f"LibKGE model {libkge_checkpoint}"
    if not entity_embeddings or not relation_embeddings or not interaction:
        raise InvalidInputError("plain embeddings need --entity-embeddings, --relation-embeddings and --interaction")
    ent = load_array(entity_embeddings, name="entity embeddings")
    rel = load_array(relation_embeddings, name="relation embeddings")
    inverse = rel.shape[0] == 2 * ds.num_relations if len(rel.shape) == 2 else False
    model = from_embeddings(interaction, ent, rel, inverse_relations=inverse, num_entities=ds.num_entities,
                            num_relations=ds.num_relations)
    return model, ds, f"{model.name} embeddings {entity_embeddings}"


def evaluate_external(entity_embeddings, relation_embeddings, interaction, libkge_checkpoint, libkge_data, dataset,
                      *, split: str = "test", data_dir=None, output=None, filter_validation_when_testing=True,
                      **evaluate_kwargs):
    """``(Results, dataset, description)``; ``output``: also write a kgeval run directory there."""
    from ..workflow.evaluation import evaluate_model
    from ..workflow.runs import check_output

    if output is not None:
        check_output(output)
    model, ds, what = load_external(entity_embeddings, relation_embeddings, interaction, libkge_checkpoint,
                                    libkge_data, dataset, data_dir=data_dir)
    results = evaluate_model(model, ds, split=split, filter_validation_when_testing=filter_validation_when_testing,
                             progress=False, **evaluate_kwargs)
    if output is not None:
        source = {"library": "libkge", "checkpoint": str(Path(libkge_checkpoint).resolve())} if libkge_checkpoint \
            else {"library": "embeddings", "entity": str(Path(entity_embeddings).resolve()),
                  "relation": str(Path(relation_embeddings).resolve())}
        save_imported_run(results, ds, model, output, source=source, split=split,
                          filter_validation_when_testing=filter_validation_when_testing)
    return results, ds, what


def save_imported_run(results, dataset, model, directory, *, source: dict, split: str,
                      filter_validation_when_testing: bool):
    """A kgeval run directory for a model trained elsewhere (no training losses; ``source`` in config.json)."""
    from ..training.loops import TrainingResult
    from ..workflow.config import EvaluationSpec, ModelSpec, PipelineConfig
    from ..workflow.pipeline import PipelineResult
    from ..workflow.runs import save_run

    config = PipelineConfig(
        dataset=dataset.name, model=ModelSpec(model.name, {"dim": model.dim, "inverse_relations": model.inverse_relations,
                                                           **model.hparams}),
        evaluation=EvaluationSpec(split=split, filter_validation_when_testing=filter_validation_when_testing))

    class ImportedRun(PipelineResult):
        def metadata(self):  # config.json also says where the model came from
            return {**super().metadata(), "source": dict(source)}

    run = ImportedRun(results=results, model=model, training=TrainingResult(losses=[], epochs_run=0),
                      timings={}, config=config, dataset=dataset)
    return save_run(run, directory)
