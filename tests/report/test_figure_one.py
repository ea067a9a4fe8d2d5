"""Figure 1 of the report: every run's bar is there and has the headline table's value."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from kgeval.cli import main
from kgeval.report import build_report, figures

FAST = ["--dataset", "nations", "--epochs", "2", "--dim", "8"]


@pytest.fixture(scope="module")
def seeds(runs, tmp_path_factory):
    """The conftest's DistMult run (seed 42) beside a DistMult run of seed 43, and the ComplEx run."""
    root = tmp_path_factory.mktemp("seeds")
    res = CliRunner().invoke(main, ["pipeline", *FAST, "--model", "distmult", "--seed", "43",
                                    "--output", str(root / "distmult43")])
    assert res.exit_code == 0, res.output
    return [runs[0], root / "distmult43", runs[1]]


def _figure_one(report, monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "to_svg", lambda fig: drawn.append(fig) or "<svg></svg>")
    figures.figure_one(report.runs, report.metric)
    return drawn[0]


@pytest.mark.parametrize("metric", ["mrr", "mr"])
def test_every_run_has_its_own_bar_with_the_table_value(seeds, monkeypatch, metric):
    """Two runs of DistMult on Nations: Figure 1 drew the first one's bar only (MRR 0.4575), the
    other run (0.4115, in the table beside it) was missing from the figure without a word."""
    report = build_report(seeds, metric=metric, num_resamples=200)
    fig = _figure_one(report, monkeypatch)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == 3
    for ax, column in zip(fig.axes, ("value", "adjusted", "z")):
        heights = sorted(p.get_height() for p in ax.patches)
        table = sorted(row[column] for run in report.runs for row in run.headline
                       if row["side"] == "both" and row["metric"] == metric)
        assert heights == table
    assert len({r.name for r in report.runs}) == 3


def test_runs_in_directories_of_the_same_name_keep_their_own_names_and_bars(seeds, tmp_path, monkeypatch):
    copies = []
    for parent in ("a", "b"):
        shutil.copytree(seeds[0] if parent == "a" else seeds[1], tmp_path / parent / "run")
        copies.append(tmp_path / parent / "run")
    report = build_report(copies, num_resamples=200)
    assert len({r.name for r in report.runs}) == 2
    fig = _figure_one(report, monkeypatch)
    values = sorted(run.headline[0]["value"] for run in report.runs)
    assert values[0] != values[1]
    assert sorted(p.get_height() for p in fig.axes[0].patches) == values


def test_axes_and_comparison_say_which_direction_is_better(seeds, monkeypatch, tmp_path):
    """MR's raw panel runs the other way from its adjusted index and z-score (lower vs higher is
    better); nothing on the figure, nor in the Markdown comparison's 'A - B' of mr, said so."""
    from kgeval.report import write_report

    report = build_report(seeds, metric="mr", num_resamples=200)
    fig = _figure_one(report, monkeypatch)
    assert [ax.get_ylabel() for ax in fig.axes] == ["lower is better", "higher is better", "higher is better"]
    report = build_report(seeds, metric="mrr", num_resamples=200)
    fig = _figure_one(report, monkeypatch)
    assert [ax.get_ylabel() for ax in fig.axes] == ["higher is better"] * 3
    text = write_report(report, tmp_path / "r.md", format="md").read_text()
    assert "| mr (lower better) |" in text and "| mrr (higher better) |" in text


def test_a_metric_the_runs_did_not_save_is_computed_from_their_rank_tables(runs, monkeypatch):
    """--metric power_mean_rank_p2 (not in results.json): all three panels of Figure 1 were empty
    (every bar NaN), exit 0, while the candidates and per-relation figures showed the metric."""
    import numpy as np

    from kgeval.results import Results

    report = build_report(runs, metric="power_mean_rank_p2", num_resamples=200)
    fig = _figure_one(report, monkeypatch)
    expected = []
    for run in report.runs:
        ranks = np.asarray(run.results.rank_table.ranks("realistic"), dtype=float)
        expected.append(np.sqrt(np.mean(ranks ** 2)))  # the power mean of the ranks, p = 2
    assert sorted(p.get_height() for p in fig.axes[0].patches) == pytest.approx(sorted(expected), rel=1e-12)
    for ax, key in zip(fig.axes[1:], ("adjusted_power_mean_rank_p2_index", "z_power_mean_rank_p2")):
        heights = [p.get_height() for p in ax.patches]
        assert all(np.isfinite(heights))
        again = sorted(Results(run.results.rank_table, metrics=["power_mean_rank_p2", key],
                               rank_types=["realistic"]).value("both", "realistic", key) for run in report.runs)
        assert sorted(heights) == again


@pytest.mark.parametrize("confidence", [0.95, 0.8])
def test_the_relation_figure_states_the_level_of_its_intervals(runs, tmp_path, confidence):
    """The per-relation figure drew the --confidence intervals as segments with the x label
    'inverse_harmonic_mean_rank (both sides; higher is better)': nothing on it said 80% or 95%."""
    from kgeval.report import write_report

    report = build_report(runs[:1], confidence=confidence, num_resamples=200)
    assert any(r["ci_low"] is not None for r in report.runs[0].relations)
    html = write_report(report, tmp_path / "r.html").read_text()
    figure = html[html.index('data-figure="relations-0"'):]
    figure = figure[:figure.index("</figure>")]
    assert f"lines: {100 * confidence:g}% bootstrap CI" in figure
    assert "realistic ranks" in figure


def test_a_run_with_a_nan_or_infinite_value_is_marked_not_left_out(runs, monkeypatch):
    """A NaN or infinite z-score in a run's results drew no bar and no word: the same empty slot
    as a model never run on that dataset."""
    import numpy as np

    report = build_report(runs, num_resamples=200)
    z_key = ("both", "realistic", "z_inverse_harmonic_mean_rank")
    report.runs[0].results._values[z_key] = float("nan")
    report.runs[1].results._values[z_key] = float("inf")
    fig = _figure_one(report, monkeypatch)
    z_axis = fig.axes[2]
    assert sum(np.isfinite(p.get_height()) for p in z_axis.patches) == 0
    assert sorted(t.get_text() for t in z_axis.texts) == ["+inf", "n/a"]
    assert not fig.axes[0].texts  # the raw values are there: no mark
