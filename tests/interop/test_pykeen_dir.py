"""``kgeval evaluate --pykeen-dir``: a real PyKEEN 1.11.1 pipeline directory (inverse triples) is
evaluated like PyKEEN's pipeline evaluated it, refused without --trust-pickle, and saved as a
kgeval run directory that kgeval reads back like its own runs."""

from __future__ import annotations

import json
import logging
import warnings

import pytest
from patience import scaled
from click.testing import CliRunner

from kgeval.cli import main
from kgeval.errors import InvalidInputError
from kgeval.workflow.foreign import evaluate_pykeen_directory
from kgeval.workflow.runs import load_run

pytest.importorskip("pykeen")


@pytest.fixture(scope="module")
def pykeen_dir(tmp_path_factory):
    from pykeen.pipeline import pipeline

    logging.getLogger("pykeen").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pipeline(dataset="Nations", dataset_kwargs={"create_inverse_triples": True}, model="ComplEx",
                       model_kwargs={"embedding_dim": 6}, training_loop="lcwa", random_seed=1,
                       training_kwargs={"num_epochs": 1, "batch_size": 256, "use_tqdm": False},
                       evaluation_kwargs={"use_tqdm": False, "batch_size": 64})
    out = tmp_path_factory.mktemp("pykeen") / "run"
    res.save_to_directory(out)
    return out


def _pykeen_metric(directory, rank_type: str, name: str) -> float:
    return json.loads((directory / "results.json").read_text())["metrics"]["both"][rank_type][name]


def test_pickle_is_refused_without_trust(pykeen_dir):
    with pytest.raises(InvalidInputError, match="loading a pickle runs code"):
        evaluate_pykeen_directory(pykeen_dir, "nations")
    res = CliRunner().invoke(main, ["evaluate", "--pykeen-dir", str(pykeen_dir), "-d", "nations"])
    assert res.exit_code != 0 and "--trust-pickle" in res.output


def test_dataset_must_be_named_and_match(pykeen_dir):
    with pytest.raises(InvalidInputError, match="does not record its dataset"):
        evaluate_pykeen_directory(pykeen_dir, trust_pickle=True)
    with pytest.raises(InvalidInputError, match="(?i)dataset .kinships. has 104"):
        evaluate_pykeen_directory(pykeen_dir, "kinships", trust_pickle=True)


def test_cli_matches_pykeens_pipeline_and_writes_a_kgeval_run(pykeen_dir, tmp_path):
    out = tmp_path / "imported"
    res = CliRunner().invoke(main, ["evaluate", "--pykeen-dir", str(pykeen_dir), "-d", "nations", "--trust-pickle",
                                    "-o", str(out), "--format", "json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output[res.output.index("{"):])
    ours = payload["metrics"]["both.realistic.inverse_harmonic_mean_rank"]
    assert ours == pytest.approx(_pykeen_metric(pykeen_dir, "realistic", "inverse_harmonic_mean_rank"), abs=1e-6)
    run = load_run(out)  # manifest verified: a normal run directory
    assert run.config.model.name == "complex" and run.config.model.options["inverse_relations"] is True
    for rank_type in ("optimistic", "pessimistic"):
        saved = json.loads((out / "results.json").read_text())["metrics"][f"both.{rank_type}.hits_at_1"]
        assert saved == pytest.approx(_pykeen_metric(pykeen_dir, rank_type, "hits_at_1"), abs=1e-6)
    again = CliRunner().invoke(main, ["evaluate", "--model-file", str(out), "--format", "json"],
                               catch_exceptions=False)  # the converted model, without pykeen's pickle
    assert again.exit_code == 0, again.output
    assert json.loads(again.output[again.output.index("{"):])["metrics"][
        "both.realistic.inverse_harmonic_mean_rank"] == pytest.approx(ours, abs=1e-6)


def test_model_file_and_pykeen_dir_are_exclusive(pykeen_dir):
    res = CliRunner().invoke(main, ["evaluate", "-d", "nations"])
    assert res.exit_code != 0 and "exactly one of --model-file and --pykeen-dir" in res.output


def test_dataset_with_other_ids_is_mapped_through_the_labels(pykeen_dir):
    """A dataset numbering the same labels differently (here: reversed) gets the same ranks per
    triple, and the converted model's rows follow the dataset's ids."""
    import numpy as np
    import torch

    import kgeval
    from kgeval.data.dataset import Dataset
    from kgeval.interop.pykeen import PyKEENScorer
    from kgeval.interop.pykeen_dir import DatasetScorer, converted_model, load_pipeline_directory
    from pykeen.datasets import Nations

    model, factory, _ = load_pipeline_directory(pykeen_dir, trust_pickle=True)
    pk = Nations()
    ents, rels = sorted(factory.entity_to_id)[::-1], sorted(factory.relation_to_id)[::-1]
    e2i, r2i = {x: i for i, x in enumerate(ents)}, {x: i for i, x in enumerate(rels)}

    def ids(tf):
        return np.array([[e2i[h], r2i[r], e2i[t]] for h, r, t in tf.triples], dtype=np.int64)

    ds = Dataset(name="reversed", training=ids(pk.training), validation=ids(pk.validation), testing=ids(pk.testing),
                 entity_labels=ents, relation_labels=rels)
    scorer = DatasetScorer(PyKEENScorer(model), ds, factory)
    ours = kgeval.evaluate(scorer, ds.testing, filter_triples=[ds.training, ds.validation], progress=False)
    ref = kgeval.evaluate(model, pk.testing.mapped_triples, progress=False,
                          filter_triples=[pk.training.mapped_triples, pk.validation.mapped_triples])
    assert np.array_equal(ours.rank_table.optimistic, ref.rank_table.optimistic)
    assert np.array_equal(ours.rank_table.pessimistic, ref.rank_table.pessimistic)
    converted = converted_model(model, scorer)
    h = torch.arange(ds.num_entities)
    r = h % ds.num_relations
    with torch.no_grad():
        torch.testing.assert_close(converted.score_heads(r, h), scorer.score_heads(r, h), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(converted.score_tails(h, r), scorer.score_tails(h, r), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # two interpreter starts under torchrun, each unpickling the PyKEEN model
def test_cli_distributed_tasks_equals_one_process(pykeen_dir):
    """``--distributed tasks``: every rank unpickles the whole PyKEEN model and ranks a share of the
    tasks; rank 0 prints one process's metrics."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "cli"))
    from cli_helpers import torchrun_json

    args = ["evaluate", "--pykeen-dir", str(pykeen_dir), "-d", "nations", "--trust-pickle", "--format", "json"]
    one = CliRunner().invoke(main, args, catch_exceptions=False)
    assert one.exit_code == 0, one.output
    many = torchrun_json(*args, "--distributed", "tasks", "--dist-timeout", str(round(scaled(60))))
    assert many["metrics"] == json.loads(one.output[one.output.index("{"):])["metrics"]


def test_a_label_map_that_is_not_one_to_one_is_a_named_error(pykeen_dir):
    """A factory whose entity_to_id gives two dataset labels one id (same number of labels as the
    model's rows) would tie their scores and leave a row unscored: refused, naming both labels."""
    from types import SimpleNamespace

    from kgeval.data import get_dataset
    from kgeval.errors import InvalidInputError
    from kgeval.interop.pykeen import PyKEENScorer
    from kgeval.interop.pykeen_dir import DatasetScorer, load_pipeline_directory

    model, factory, _ = load_pipeline_directory(pykeen_dir, trust_pickle=True)
    ds = get_dataset("nations")
    DatasetScorer(PyKEENScorer(model), ds, factory)  # the saved map itself is fine
    a, b = ds.entity_labels[:2]
    bad = SimpleNamespace(entity_to_id={**factory.entity_to_id, b: factory.entity_to_id[a]},
                          relation_to_id=factory.relation_to_id, mapped_triples=factory.mapped_triples)
    with pytest.raises(InvalidInputError, match="not one-to-one"):
        DatasetScorer(PyKEENScorer(model), ds, bad)


def test_broken_metadata_json_is_a_named_error(pykeen_dir, tmp_path):
    import shutil

    from kgeval.interop.pykeen_dir import load_pipeline_directory

    copy = tmp_path / "run"
    shutil.copytree(pykeen_dir, copy)
    (copy / "metadata.json").write_text('{"dataset": "nations"')
    with pytest.raises(InvalidInputError, match=r"metadata.json: not PyKEEN's metadata.json \(invalid JSON"):
        load_pipeline_directory(copy, trust_pickle=True)
    (copy / "metadata.json").write_text("[" * 100_000)  # was a RecursionError traceback
    with pytest.raises(InvalidInputError, match="nested deeper than 64 levels"):
        load_pipeline_directory(copy, trust_pickle=True)
    (copy / "metadata.json").unlink()
    (copy / "metadata.json").symlink_to("/dev/zero")  # was read until memory ran out
    with pytest.raises(InvalidInputError, match="outside the directory"):
        load_pipeline_directory(copy, trust_pickle=True)


def test_pykeen_output_given_as_model_file_names_pykeen_dir(pykeen_dir):
    """Before: '... is not a kgeval run directory (no config.json)' and, for trained_model.pkl, 'not a readable
    kgeval model file (UnpicklingError: Weights only load failed ...)': neither said what the path is."""
    for path in (pykeen_dir, pykeen_dir / "trained_model.pkl"):
        res = CliRunner().invoke(main, ["evaluate", "--model-file", str(path), "-d", "nations"])
        assert res.exit_code != 0
        assert f"evaluate it with --pykeen-dir {pykeen_dir} --trust-pickle" in " ".join(res.output.split()), res.output


def test_every_metric_of_pykeens_results_json_is_reproduced(pykeen_dir):
    """All 225 entries of PyKEEN's results.json (3 sides x 3 rank types x 25 metrics: adjusted, z-scores,
    hits, variance, ...) equal kgeval's for the same protocol (PyKEEN keeps float32: ~1e-6 off)."""
    results, _ = evaluate_pykeen_directory(pykeen_dir, "nations", trust_pickle=True, progress=False)
    theirs = json.loads((pykeen_dir / "results.json").read_text())["metrics"]
    keys = [(f"{side}.{rank_type}.{name}", value) for side, by_type in theirs.items()
            for rank_type, by_name in by_type.items() for name, value in by_name.items()]
    assert len(keys) == 225
    for key, value in keys:
        assert results.get_metric(key) == pytest.approx(value, rel=1e-5, abs=1e-5), key
