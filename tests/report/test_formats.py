"""kgeval report's text formats and its refusals."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from click.testing import CliRunner

from kgeval.cli import main
from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.report import build_report, figures, write_report


def _report(runs, tmp_path, fmt, *extra):
    path = tmp_path / f"report.{fmt}"
    res = CliRunner().invoke(main, ["report", *map(str, runs), "-o", str(path), "--format", fmt, *extra])
    assert res.exit_code == 0, res.output
    return path.read_text()


def test_csv_and_json_carry_the_exact_values(runs, tmp_path):
    metrics = json.loads((runs[0] / "results.json").read_text())["metrics"]
    rows = [r for r in csv.DictReader(io.StringIO(_report(runs, tmp_path, "csv"))) if r["directory"] == str(runs[0])]
    assert {r["side"] for r in rows} == {"head", "tail", "both"}
    for r in rows:
        assert float(r["value"]) == metrics[r["key"]]
        assert float(r["z"]) == metrics[r["key"].replace("realistic.", "realistic.z_")]
    doc = json.loads(_report(runs, tmp_path, "json", "--metric", "hits@10"))
    assert doc["metric"] == "hits_at_10"
    relations = doc["runs"][0]["relations"]
    assert sum(r["count"] for r in relations) == json.loads((runs[0] / "results.json").read_text())["protocol"]["num_tasks"]


def test_markdown_and_latex_tables(runs, tmp_path):
    md = _report(runs, tmp_path, "md")
    assert "| distmult on Nations | both | mrr |" in md and "evaluation: " in md
    assert "| distmult | complex | mrr (higher better) |" in md  # the pairwise comparison (one dataset: labels)
    tex = _report(runs, tmp_path, "latex")
    assert "\\begin{tabular}" in tex and "Hits@10" in tex and "\\toprule" in tex


def test_not_a_run_directory_is_a_named_error(runs, tmp_path):
    res = CliRunner().invoke(main, ["report", str(runs[0]), str(tmp_path), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 2
    assert f"{tmp_path} is not a kgeval run directory" in res.output


def test_bad_options_are_named(runs):
    with pytest.raises(InvalidInputError, match="confidence"):
        build_report(runs[:1], confidence=1.5)
    with pytest.raises(InvalidInputError, match="num_resamples"):
        build_report(runs[:1], num_resamples=0)
    with pytest.raises(UnknownNameError):
        build_report(runs[:1], metric="mrrr")
    with pytest.raises(InvalidInputError, match="at least one"):
        build_report([])


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True, "0"])
def test_bad_seed_is_named_before_any_work(runs, tmp_path, seed):
    """build_report(seed=-1) gave a report with every interval cell None and no comparison, said only in
    a note ('runs on Nations not compared: seed must be ...'): the statistics leave a refused cell empty."""
    with pytest.raises(InvalidInputError, match=r"^seed must be an integer in \[0, 2\*\*32\)"):
        build_report(runs, seed=seed, num_resamples=200)
    with pytest.raises(InvalidInputError, match=r"^seed must be"):  # before loading anything
        build_report([tmp_path / "not-a-run"], seed=seed)


def test_one_directory_is_one_run_and_non_paths_are_named(runs):
    """build_report("runs/a") iterated the string: '/ is not a kgeval run directory'; a Path, None or a
    number raised TypeError ('PosixPath' object is not iterable)."""
    want = build_report([runs[0]], num_resamples=200).runs[0].headline
    for one in (runs[0], str(runs[0])):
        report = build_report(one, num_resamples=200)
        assert len(report.runs) == 1 and report.runs[0].headline == want
    for bad, message in ((None, "directories must be run directories"), (5, "directories must be run directories"),
                         ([runs[0], None], "a run directory must be a path"), ([b"run"], "a run directory must be a path")):
        with pytest.raises(InvalidInputError, match=message):
            build_report(bad)


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_write_report_names_a_non_report(tmp_path, fmt):
    """write_report(None, ...) raised AttributeError: 'NoneType' object has no attribute 'confidence'."""
    with pytest.raises(InvalidInputError, match="write_report needs a Report .* got NoneType"):
        write_report(None, tmp_path / f"r.{fmt}", format=fmt)
    assert not (tmp_path / f"r.{fmt}").exists()


def test_unseeded_report_has_its_intervals_and_comparison(runs):
    # unseeded, so each run draws other resamples: at 200 (the BCa minimum) a headline BCa tail moved below
    # 1/200 in ~2 of 10 runs (a refused headline cell, this test failing at random); at 2,000 the headline
    # intervals stand, and each relation still gets 2,000 // 5 = 400
    report = build_report(runs, seed=None, num_resamples=2000)
    row = report.runs[0].headline[0]
    assert row["ci_low"] <= row["value"] <= row["ci_high"] and row["ci_low"] < row["ci_high"]
    # the only notes: per-relation intervals the BCa refuses (a tail beyond its resamples), not the seed
    assert report.comparison and all("per-relation intervals left empty" in n for n in report.notes), report.notes


def test_format_follows_the_output_suffix_and_replacing_is_said(runs, tmp_path):
    """-o report.md without --format wrote HTML into report.md; writing over a file said nothing."""
    path = tmp_path / "report.md"
    res = CliRunner().invoke(main, ["report", str(runs[0]), "-o", str(path), "--resamples", "200"])
    assert res.exit_code == 0, res.output
    assert path.read_text().startswith("# kgeval report") and "(md, 1 run(s))" in res.output
    assert "replaced" not in res.output
    res = CliRunner().invoke(main, ["report", str(runs[0]), "-o", str(path), "--resamples", "200", "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert "it replaced the existing file" in res.output and path.read_text().startswith('"run","directory",')
    res = CliRunner().invoke(main, ["report", str(runs[0]), "-o", str(tmp_path / "r.txt"), "--resamples", "200"])
    assert res.exit_code == 0 and (tmp_path / "r.txt").read_text().startswith("<!DOCTYPE html>")  # else html


def test_output_in_a_missing_directory_is_named(runs, tmp_path):
    """The error named a temporary file ('.x.html.68__cehy.tmp'), after the whole report was built."""
    res = CliRunner().invoke(main, ["report", str(runs[0]), "-o", str(tmp_path / "none" / "x.html")])
    assert res.exit_code == 2
    assert res.output.strip() == f"error: cannot write {tmp_path / 'none' / 'x.html'}: {tmp_path / 'none'} is not an existing directory"


@pytest.mark.parametrize(("metric", "fmt", "missing"), [("median_rank", "html", "no z-score"),
                                                        ("count", "html", "no adjusted index and no z-score"),
                                                        ("count", "md", "no adjusted index")])
def test_a_figure_metric_without_adjusted_index_or_z_score_is_named(runs, tmp_path, metric, fmt, missing):
    """--metric median_rank failed with "unknown metric 'z_median_rank'" (a name the user never
    gave) while drawing the HTML figures; --metric count with "unknown metric 'adjusted_count_index'"."""
    res = CliRunner().invoke(main, ["report", *map(str, runs), "-o", str(tmp_path / f"r.{fmt}"), "--metric", metric])
    assert res.exit_code != 0 and f"{metric} has {missing}." in res.output, res.output
    assert "unknown metric" not in res.output and not (tmp_path / f"r.{fmt}").exists()
    if fmt == "html":
        report = build_report(runs, metric="mrr", num_resamples=200)
        with pytest.raises(InvalidInputError, match=f"{metric} has {missing}"):
            figures.figure_one(report.runs, metric)
        with pytest.raises(InvalidInputError, match=f"{metric} has {missing}"):
            figures.candidates_figure(report.runs[0].results, metric)


def test_median_rank_keeps_its_markdown_report(runs, tmp_path):
    """The Markdown report has no figures: its per-relation table needs the adjusted index only."""
    res = CliRunner().invoke(main, ["report", *map(str, runs), "-o", str(tmp_path / "r.md"), "--metric",
                                    "median_rank", "--resamples", "200"])
    assert res.exit_code == 0, res.output


def test_too_few_resamples_are_refused_by_name_before_any_work(runs, tmp_path):
    """build_report(num_resamples=5) built a report whose per-relation intervals came from
    max(1, 5 // 5) = 1 resample each: every one a point, the relation's own value."""
    with pytest.raises(InvalidInputError, match=r"^num_resamples must be at least 200 for a BCa .* got 199$"):
        build_report(runs, num_resamples=199)
    with pytest.raises(InvalidInputError, match=r"^num_resamples must be at least 400 .* 0\.975"):
        build_report([tmp_path / "not-a-run"], confidence=0.975, num_resamples=399)  # before loading anything
    out = tmp_path / "r.md"
    res = CliRunner().invoke(main, ["report", str(runs[0]), "-o", str(out), "--resamples", "5"])
    assert res.exit_code == 2 and "--resamples must be at least 200" in res.output, res.output
    assert "num_resamples" not in res.output and not out.exists()
    res = CliRunner().invoke(main, ["report", str(runs[0]), "-o", str(out), "--resamples", "20", "--confidence", "0.8"])
    assert res.exit_code == 2 and "--resamples must be at least 50 " in res.output, res.output


def test_every_interval_has_at_least_the_minimum_resamples_and_refusals_are_noted(runs, monkeypatch):
    """The per-relation intervals took max(1, num_resamples // 5) resamples: 40 of a report of 200,
    below what an interval at 95% needs (their bounds the extreme resamples), 1 at 5-9 (points)."""
    from kgeval.report import stats

    used, real = [], stats.confidence_interval

    def spy(*args, num_resamples, **kwargs):
        used.append(num_resamples)
        return real(*args, num_resamples=num_resamples, **kwargs)

    monkeypatch.setattr(stats, "confidence_interval", spy)
    report = build_report(runs[:1], num_resamples=200)
    assert len(used) > len(report.runs[0].headline)  # the per-relation intervals are among them
    assert min(used) == 200  # 10 / (1 - 0.95), BCa's minimum at 95%
    used.clear()
    build_report(runs[:1], num_resamples=2000)
    assert sorted(set(used)) == [400, 2000]  # a fifth of a large count for each relation
    # a relation interval the bootstrap refuses (a BCa tail beyond its resamples) is empty and said so
    from kgeval.report.model import _units

    run = report.runs[0]
    table = run.results.rank_table
    empty = [r for r in run.relations
             if r["ci_low"] is None and _units(table.subset(table.relation == r["relation_id"])) > 1]
    notes = [n for n in report.notes if "per-relation intervals left empty: 200 resamples each are too few" in n]
    assert empty and notes == [n for n in notes if n.startswith(f"{run.name}: {len(empty)} of {len(run.relations)} "
                                                                "per-relation")], notes
    assert len(notes) == 1 and "BCa" in notes[0]
    # the note says what fills them, in Python's terms: a fifth of num_resamples goes to each relation
    need = int(re.search(r"the widest needs ([\d,]+)", notes[0]).group(1).replace(",", ""))
    assert f"rebuild with num_resamples={5 * need} or more" in notes[0] and "method=" not in notes[0]
