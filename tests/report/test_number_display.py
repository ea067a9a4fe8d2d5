"""Numbers shown to people: rounding never makes a value look exact, zero has no sign, missing
and undefined values say so, and p-values print the same way in every table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kgeval.ranks import RankTable
from kgeval.results import Results
from kgeval.results.render import format_value


@pytest.mark.parametrize(("value", "shown"), [
    (0.99996, "0.99996"), (0.99999, "0.99999"), (1 - 2**-53, "0.9999999999999999"),  # was 1.0000
    (1.00004, "1.00004"), (2.00003, "2.00003"), (99999.99999, "99999.99999"),  # was 1.0000, 2.0000, 100000.0000
    (1.0, "1.0000"), (3.0, "3.0000"), (0.5, "0.5000"), (0.123456, "0.1235"),  # exact or not near a whole number
    (-0.0, "0.0000"), (0.0, "0.0000"),  # was -0.0000
    (1.5e-5, "1.500e-05"), (float("nan"), "nan"), (float("-inf"), "-inf"), (None, "—"),
])
def test_format_value_never_rounds_onto_a_whole_number(value, shown):
    assert format_value(value) == shown
    if shown not in ("nan", "-inf", "—"):
        assert (float(shown) == round(float(shown))) == (value == round(value))  # whole only when exact


def test_summary_table_hits_just_below_one():
    """25,000 tasks, one rank 11: hits@10 = 0.99996 was printed 1.0000 (a perfect-looking model)."""
    n = 25_000
    ranks = np.ones(n)
    ranks[0] = 11
    res = Results(RankTable.from_ranks(ranks=ranks, num_candidates=100))
    line = next(l for l in res.summary_table().splitlines() if l.startswith("hits_at_10"))
    assert line.split()[-1] == format_value(1 - 1 / n) == "0.99996"
    assert not math.isclose(float(line.split()[-1]), 1.0, abs_tol=1e-5)


@pytest.mark.parametrize(("log10_p", "shown"), [
    (-400.001, "1.0e-400"),  # was 10.0e-401 (the mantissa rounded up to 10)
    (-299.999, "1.0e-300"), (-300.0001, "1.0e-300"),  # was 1e-300 and 10.0e-301: one form either side of 1e-300
    (-6.5, "3.2e-07"), (-4241.3, "5.0e-4242"),
    (-1e-5, "0.99998"),  # was 1.0000
    (float("-inf"), "0"),  # was OverflowError: cannot convert float infinity to integer
    (float("nan"), "n/a"),
])
def test_format_p(log10_p, shown):
    from kgeval.significance.pvalues import format_p

    assert format_p(log10_p) == shown


@pytest.mark.parametrize(("row", "shown"), [
    ({"p": 0.0, "log10_p": -4241.3}, "5.0e-4242"),  # was 10^-4241.3 while the CLI printed 5.0e-4242
    ({"p": 0.0, "log10_p": float("nan")}, "n/a"),  # was 10^nan
    ({"p": 10**-6.5, "log10_p": -6.5}, "3.2e-07"),  # was 3.162e-07 while the CLI printed 3.2e-07
    ({"p": 0.99998, "log10_p": math.log10(0.99998)}, "0.99998"),  # was 1.0000
    ({"p": None, "log10_p": None}, "—"),
])
def test_report_p_values_print_as_the_cli_prints_them(row, shown):
    from kgeval.report.text import p_text

    assert p_text(row) == shown


def test_cli_metric_just_below_one(tmp_path):
    """``kgeval metrics FILE --metric mrr`` printed 1 (six significant digits) for an MRR of 0.99999995."""
    from click.testing import CliRunner

    from kgeval.cli import main

    path = tmp_path / "ranks.tsv"
    path.write_text("optimistic\tpessimistic\tnum_candidates\tweight\n1\t1\t10\t10000000\n2\t2\t10\t1\n")
    res = CliRunner().invoke(main, ["metrics", str(path), "--metric", "mrr"])
    assert res.exit_code == 0, res.output
    shown = float(res.output.split()[1])
    expected = (1e7 + 0.5) / (1e7 + 1)
    assert shown != 1.0 and shown == pytest.approx(expected, rel=1e-15)


def test_fixed_precision_siblings_do_not_round_onto_whole_numbers():
    """compare's table printed 1.0000 for 0.99996 and -0.0000 for -0.0; adjust printed a z of -0.001
    as -0.00; a ConfidenceInterval of (0.99996, 0.99999) printed [1, 1]; Results' repr mrr=1.0000."""
    from kgeval.cli.adjust import _table
    from kgeval.cli.compare import _num
    from kgeval.significance.bootstrap import ConfidenceInterval

    assert float(_num(0.99996)) == 0.99996 and _num(-0.0) == "0.0000" and _num(0.5) == "0.5000"
    assert float(_num(0.99996, 3)) == 0.99996 and _num(2e-4, 3) == "0.0002"
    row = {"metric": "mrr", "side": "both", "value": 0.99996, "expected_value": 0.001, "std": 0.01,
           "adjusted_index": 0.99995, "z": -0.001, "log10_p_value": -1e-5, "p_method": "normal"}
    cells = _table([row])[2].split()
    assert cells[2:8] == ["0.99996", "0.0010", "0.0100", "0.99995", "-0.0010", "0.99998"]
    lo, hi = (str(ConfidenceInterval(0.99996, 0.99999)).strip("[]")).split(", ")
    assert (float(lo), float(hi)) == (0.99996, 0.99999)
    n = 25_000
    ranks = np.ones(n)
    ranks[0] = 2
    assert "mrr=0.99998," in repr(Results(RankTable.from_ranks(ranks=ranks, num_candidates=100)))


def test_html_states_the_confidence_level_unrounded(runs):
    """A report at --confidence 0.975 said 'intervals: 98%' (a 0% format rounded 97.5 up)."""
    from kgeval.report import build_report
    from kgeval.report.html import render_html

    page = render_html(build_report(runs[:1], confidence=0.975, num_resamples=400))
    assert "intervals: 97.5%." in page and "98%" not in page


def test_comparison_intervals_use_the_reports_confidence(runs):
    """build_report(confidence=0.5) said 'intervals: 50%' but its comparison CIs were kgeval.compare's
    default 95% ones (the level was not passed on)."""
    import kgeval
    from kgeval.report import build_report

    report = build_report(runs, confidence=0.5, num_resamples=200)
    direct = kgeval.compare(*[(r.name, r.results) for r in report.runs], metrics=("mrr", "hits@10", "mr", "gmr"),
                            num_resamples=200, seed=0, confidence=0.5)
    direct = direct.to_dict("records") if hasattr(direct, "to_dict") else list(direct)
    assert [(r["ci_low"], r["ci_high"]) for r in report.comparison] == [(r["ci_low"], r["ci_high"]) for r in direct]
    wide = build_report(runs, confidence=0.95, num_resamples=200).comparison
    assert report.comparison[0]["ci_high"] - report.comparison[0]["ci_low"] < wide[0]["ci_high"] - wide[0]["ci_low"]


def test_report_tables_say_what_their_numbers_are(runs):
    """The headline tables' headers were 'CI' and 'p' (no level; p one-sided against chance while the
    comparison's 'p' is a two-sided paired test) and no table named the rank type."""
    from kgeval.report import build_report
    from kgeval.report.html import render_html
    from kgeval.report.text import render_latex, render_markdown

    report = build_report(runs, confidence=0.9, num_resamples=100)
    md, tex, page = render_markdown(report), render_latex(report), render_html(report)
    assert "| value | 90% CI | adjusted index | z | p vs chance |" in md
    assert "| A - B | 90% CI | p (two-sided) | p corrected (Holm) |" in md
    assert "90\\% BCa bootstrap interval over" in tex and "Model & MRR & Hits@1" in tex
    # the headline table of each run, the per-relation tables, the comparison, each run's relation categories
    assert page.count("<th>90% CI</th>") == 7 and "<th>CI</th>" not in page and "<th>p vs chance</th>" in page
    for text in (md, tex, page):
        assert "realistic ranks (ties count half)" in text and "one-sided" in text
    assert "90\\% paired bootstrap interval" in tex and "p two-sided, Holm-corrected" in tex  # the comparison


@pytest.mark.parametrize(("p", "shown"), [(1e-5, "1.0e-05"), (0.99996, "0.99996"), (0.0, "0"), (None, "—"),
                                          (float("nan"), "n/a"), (0.0220, "0.0220")])
def test_comparison_p_values_print_as_the_headline_ones(p, shown):
    """The report's comparison printed p = 1e-5 as 1.000e-05 (the headline's form is 1.0e-05)."""
    from kgeval.report.text import p_value_text

    assert p_value_text(p) == shown
