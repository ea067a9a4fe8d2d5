"""`kgeval pipeline --replicates` and `kgeval compare`: replicate summaries, run- and task-level rows."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from cli_helpers import run
from scipy.stats import t

from kgeval import RankTable, compare
from kgeval.results import Results

FAST = ["--epochs", "2", "--dim", "8"]


@pytest.fixture(scope="module")
def replicated(tmp_path_factory):
    """Two replicate sets (2 seeds each) of two models on Nations."""
    root = tmp_path_factory.mktemp("replicates")
    for model in ("distmult", "complex"):
        res = run("pipeline", "-d", "nations", "-m", model, *FAST, "--replicates", "2", "-o", root / model)
        assert res.exit_code == 0, res.output
        assert "2 replicates (seeds 42..43)" in res.output
    return root


def test_replicate_summary_is_mean_sd_and_t_interval_of_the_runs(replicated):
    summary = json.loads((replicated / "distmult" / "replicates.json").read_text())
    assert summary["seeds"] == [42, 43]
    values = [Results.load_json(replicated / "distmult" / f"seed{s}" / "results.json")
              for s in summary["seeds"]]
    assert [json.loads((replicated / "distmult" / f"seed{s}" / "config.json").read_text())["configuration"]["seed"]
            for s in summary["seeds"]] == [42, 43]
    for key in ("both.realistic.inverse_harmonic_mean_rank", "both.realistic.arithmetic_mean_rank"):
        x = np.array([r[key] for r in values])
        s = summary["summary"][key]
        half = t.ppf(0.975, 1) * x.std(ddof=1) / np.sqrt(2)
        assert s["mean"] == pytest.approx(x.mean())
        assert s["sd"] == pytest.approx(x.std(ddof=1))
        assert (s["ci_low"], s["ci_high"]) == pytest.approx((x.mean() - half, x.mean() + half))


def test_compare_replicates_has_task_and_run_rows(replicated):
    res = run("compare", replicated / "distmult", replicated / "complex", "--metric", "mrr", "--format", "json",
              "--resamples", "200")
    assert res.exit_code == 0, res.output
    rows = {r["level"]: r for r in json.loads(res.output)}
    assert set(rows) == {"task", "run"}
    assert rows["run"]["p_method"] == "welch t" and rows["task"]["p_method"] == "monte carlo"
    mean_a = np.mean([Results.load_json(replicated / "distmult" / f"seed{s}" / "results.json")["mrr"] for s in (42, 43)])
    assert rows["run"]["value_a"] == pytest.approx(mean_a)
    assert rows["task"]["value_a"] == pytest.approx(mean_a)


def test_compare_single_runs_matches_the_api_and_prints_csv(replicated):
    a, b = replicated / "distmult" / "seed42", replicated / "complex" / "seed42"
    res = run("compare", a, b, "--format", "csv", "--test", "wilcoxon", "--resamples", "100", "--seed", "3")
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.output)))
    assert [r["metric"] for r in rows] == ["mrr", "hits@10", "mr", "gmr"]
    assert {r["level"] for r in rows} == {"task"}
    api = compare(("distmult/seed42", RankTable.load(a / "rank_table.npz")),
                  ("complex/seed42", RankTable.load(b / "rank_table.npz")),
                  test="wilcoxon", num_resamples=100, seed=3).to_dict("records")
    for row, ref in zip(rows, api):
        assert float(row["p_value"]) == pytest.approx(ref["p_value"])
        assert float(row["difference"]) == pytest.approx(ref["difference"])
    text = run("compare", a, b, "--metric", "mr", "--resamples", "100")
    assert text.exit_code == 0 and "mr (lower better)" in text.output


def test_compare_refuses_non_runs(replicated, tmp_path):
    res = run("compare", replicated / "distmult", tmp_path)
    assert res.exit_code == 2 and "not a kgeval run directory" in res.output
    res = run("compare", replicated / "distmult")
    assert res.exit_code == 2 and "at least two" in res.output
    (tmp_path / "replicates.json").write_text("{}")
    res = run("compare", replicated / "distmult", tmp_path)
    assert res.exit_code == 2 and "replicate summary" in res.output


def test_replicates_num_replicates_is_checked():
    from kgeval import pipeline, replicates
    from kgeval.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="num_replicates"):
        replicates(dataset="nations", model="distmult", num_replicates=1)
    with pytest.raises(InvalidInputError, match="num_replicates"):
        replicates(dataset="nations", model="distmult")
    with pytest.raises(InvalidInputError, match="2\\*\\*32"):
        replicates(dataset="nations", model="distmult", random_seed=2**32 - 1, num_replicates=2)
    # the deprecated pipeline(num_replicates=) path: the same checks, and a warning naming its replacement
    with pytest.warns(DeprecationWarning, match="kgeval.replicates"), \
            pytest.raises(InvalidInputError, match="num_replicates"):
        pipeline(dataset="nations", model="distmult", num_replicates=1)


def test_compare_refuses_damaged_runs_and_other_datasets(replicated, tmp_path):
    import shutil

    from kgeval.errors import InvalidInputError

    good = replicated / "complex" / "seed42"
    broken = tmp_path / "no_table"
    shutil.copytree(replicated / "distmult" / "seed42", broken)
    (broken / "rank_table.npz").unlink()
    with pytest.raises(InvalidInputError):
        compare(broken, good)
    res = run("compare", broken, good)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    garbled = tmp_path / "garbled"
    shutil.copytree(replicated / "distmult" / "seed42", garbled)
    (garbled / "rank_table.npz").write_bytes(b"not a zip file")
    with pytest.raises(InvalidInputError):
        compare(garbled, good)


def test_replicate_set_of_runs_evaluated_otherwise_is_refused(replicated, tmp_path):
    """A replicate set is one model: its runs were checked only through the first run's protocol, so
    a set holding a run evaluated with tie_tolerance=0.5 was averaged in (MRR 0.365 = mean of 0.458
    and 0.273) and compared without a word."""
    import shutil

    from kgeval import pipeline
    from kgeval.significance.align import ProtocolMismatchError

    mixed = tmp_path / "mixed"
    shutil.copytree(replicated / "distmult" / "seed42", mixed / "seed42")
    pipeline(dataset="nations", model="distmult", epochs=2, model_kwargs={"dim": 8}, random_seed=43,
             evaluation_kwargs={"tie_tolerance": 0.5}, progress=False).save(mixed / "seed43")
    (mixed / "replicates.json").write_text(json.dumps({"format": "kgeval-replicates", "version": 1,
                                                      "seeds": [42, 43], "runs": ["seed42", "seed43"]}))
    for pair in ((mixed, replicated / "complex"), (replicated / "complex", mixed)):
        with pytest.raises(ProtocolMismatchError, match=r"replicate set .*mixed.*different tie tolerance \(0.0 vs 0.5\)"):
            compare(*pair, metrics="mrr", num_resamples=40)
    res = run("compare", mixed, replicated / "complex")
    assert res.exit_code == 2 and "different tie tolerance (0.0 vs 0.5)" in res.output and "Traceback" not in res.output


def test_replicate_set_listing_a_run_twice_is_refused(replicated, tmp_path):
    """runs ["seed42", "./seed42", "seed43"] counted seed42 as two seeds: the run-level Welch test saw
    3 runs (values 0.458, 0.458, 0.411) where there were 2."""
    import shutil

    from kgeval.errors import InvalidInputError

    twice = tmp_path / "twice"
    shutil.copytree(replicated / "distmult", twice)
    (twice / "replicates.json").write_text(json.dumps({"runs": ["seed42", "./seed42", "seed43"]}))
    with pytest.raises(InvalidInputError, match="lists the run 'seed42' more than once"):
        compare(twice, replicated / "complex", metrics="mrr", num_resamples=40)


def test_text_table_names_the_run_level_interval(replicated):
    """The footer called every CI a 'paired bootstrap percentile interval'; the run level's is
    Welch's t interval of the difference of the seeds' means, not a bootstrap."""
    res = run("compare", replicated / "distmult", replicated / "complex", "--metric", "mrr", "--resamples", "50")
    assert res.exit_code == 0, res.output
    assert "Welch t interval of the difference of the run means (run level)" in res.output


@pytest.mark.parametrize("side", ["head", "tail", "both"])
def test_compare_text_footer_names_the_side_compared(replicated, side):
    """The footer said '(head and tail tasks together)' under --side tail too, where only tail tasks are compared."""
    res = run("compare", replicated / "distmult", replicated / "complex", "--metric", "mrr", "--side", side,
              "--resamples", "50")
    assert res.exit_code == 0, res.output
    assert f"side {side}," in res.output
    assert ("head and tail tasks together" in res.output) == (side == "both")
    if side != "both":
        assert f"({side} tasks only)" in res.output


def test_too_few_resamples_are_refused_naming_the_flag(replicated):
    """--resamples 1 printed a task-level CI of one point ([0.039, 0.039] for an MRR difference
    of 0.0455): the paired bootstrap's only resample."""
    a, b = replicated / "distmult" / "seed42", replicated / "complex" / "seed42"
    res = run("compare", a, b, "--metric", "mrr", "--resamples", "1")
    assert res.exit_code == 2 and "--resamples must be at least 40 " in res.output, res.output
    assert "got 1" in res.output and "Traceback" not in res.output
    res = run("compare", a, b, "--metric", "mrr", "--resamples", "100", "--confidence", "0.99")
    assert res.exit_code == 2 and "--resamples must be at least 200 " in res.output, res.output
    res = run("compare", a, b, "--metric", "mrr", "--resamples", "40", "--format", "json")
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)[0]
    assert row["ci_low"] < row["ci_high"]


def test_runs_on_two_datasets_are_refused_in_words(tmp_path):
    """Issue 32: the refusal says what differs in words first, not FilterSet(...) reprs."""
    from click.testing import CliRunner

    from kgeval.cli import main

    runner = CliRunner()
    for name in ("nations", "kinships"):
        res = runner.invoke(main, ["pipeline", "-d", name, "-m", "distmult", "--epochs", "1", "-o", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["compare", str(tmp_path / "nations"), str(tmp_path / "kinships")])
    assert res.exit_code == 2
    assert res.output.startswith("error: different datasets (Nations vs Kinships)"), res.output
    assert "FilterSet(" not in res.output


def test_runs_on_two_splits_are_refused_in_words(tmp_path):
    """A test run and a validation run of one dataset: 'different splits' first, not their filter sets."""
    import kgeval
    from kgeval.workflow import PipelineConfig

    config = PipelineConfig().with_paths({"dataset": "nations", "model.name": "distmult", "training.epochs": 1})
    for split in ("test", "valid"):
        kgeval.pipeline(config.with_paths({"evaluation.split": split}), progress=False).save(tmp_path / split)
    res = run("compare", tmp_path / "test", tmp_path / "valid", "--metric", "mrr")
    assert res.exit_code == 2
    assert res.output.startswith("error: different splits (test vs validation): 'test' and 'valid'"), res.output
    same = run("compare", tmp_path / "valid", tmp_path / "valid", "--metric", "mrr", "--resamples", "40")
    assert same.exit_code == 0, same.output
