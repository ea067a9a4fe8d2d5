"""``--type-constraints FILE|train`` on kgeval pipeline and evaluate: saved with the run, named in every header, a
file read with the dataset's labels, and the same numbers as the Python API."""

from __future__ import annotations

import json

from cli_helpers import headline_mrr, run

FAST = ["--model", "distmult", "--epochs", "2", "--dim", "8", "--type-constraints", "train"]


def test_pipeline_saves_and_prints_the_constraints(trained):
    out, printed = trained
    assert "type constraints: inferred from training (1,592 triples); 110 of 110 relation sides" in printed
    config = json.loads((out / "config.json").read_text())
    assert config["configuration"]["evaluation"]["options"]["type_constraints"] == "train"
    protocol = json.loads((out / "results.json").read_text())["protocol"]
    assert protocol["type_constraints"]["outside_tasks"] > 0
    # re-evaluated as the run was: the same constraints and numbers
    res = run("evaluate", "--model-file", out)
    assert res.exit_code == 0, res.output
    assert "type constraints: inferred from training" in res.output
    assert headline_mrr(res.output) == headline_mrr(printed)


def test_evaluate_reads_a_label_file_like_the_python_api(trained, tmp_path):
    import kgeval
    from kgeval.data import get_dataset, read_type_constraints
    from kgeval.workflow.runs import load_run

    out, _ = trained
    ds = get_dataset("nations")
    lines = ["relation\tside\tentity"]
    for h, r, t in ds.to_labels(ds.training[::3]):
        lines += [f"{r}\thead\t{h}", f"{r}\ttail\t{t}"]
    path = tmp_path / "types.tsv"
    path.write_text("\n".join(lines) + "\n")
    res = run("evaluate", "--model-file", out, "--type-constraints", path, "--format", "json")
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got["protocol"]["type_constraints"]["source"] == "file types.tsv (relation, side, entity)"
    sets = read_type_constraints(path, num_entities=ds.num_entities, num_relations=ds.num_relations,
                                 entity_to_id=ds.entity_to_id, relation_to_id=ds.relation_to_id)
    model = load_run(out).load_model()
    api = kgeval.evaluate(model, ds.testing, filter_triples={"training": ds.training, "validation": ds.validation},
                          type_constraints=sets, progress=False)
    key = "both.realistic.inverse_harmonic_mean_rank"
    assert got["metrics"][key] == api.get_metric(key)
    assert got["protocol"]["type_constraints"]["sha256"] == sets.sha256()


def test_entity_types_widen_train(trained, tmp_path):
    out, _ = trained
    from kgeval.data import get_dataset

    ds = get_dataset("nations")
    path = tmp_path / "types.tsv"
    path.write_text("".join(f"{label}\t{'big' if i % 2 else 'small'}\n" for i, label in enumerate(ds.entity_labels)))
    res = run("evaluate", "--model-file", out, "--type-constraints", "train", "--entity-types", path)
    assert res.exit_code == 0, res.output
    assert "widened by 2 entity types" in res.output


def test_bad_values_are_named(trained, tmp_path):
    out, _ = trained
    res = run("evaluate", "--model-file", out, "--type-constraints", tmp_path / "missing.txt")
    assert res.exit_code != 0 and "neither 'train' nor an existing file" in res.output
    bad = tmp_path / "bad.tsv"
    bad.write_text("brazil\tembassy\thead\n")
    res = run("evaluate", "--model-file", out, "--type-constraints", bad)
    assert res.exit_code != 0 and "bad.tsv, line 1" in res.output, res.output
    res = run("evaluate", "--model-file", out, "--type-constraints", bad, "--entity-types", bad)
    assert res.exit_code != 0 and "--entity-types widens --type-constraints train only" in res.output
