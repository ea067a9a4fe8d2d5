"""Hostile run, dataset and directory names in every report format (issue 31, class 5).

Each format is read back with its own reading rules (GFM table cells, LaTeX tabular cells, CSV, HTML,
matplotlib's mathtext detection): the cells hold the intended names, no column shifts, no HTML tag, no
formula cell, no mathtext. Before: a ``|`` in a run name moved every Markdown number one column right,
``<img>`` reached Markdown viewers, ``^``/``~`` stayed raw in LaTeX, ``=cmd`` became a spreadsheet formula.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import io
import re
import string
from html.parser import HTMLParser
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kgeval._escape import CSV_FORMULA_START, csv_value, mathtext_literal, plain_text  # noqa: E402
from kgeval.report import build_report  # noqa: E402
from kgeval.report.html import render_html  # noqa: E402
from kgeval.report.text import render_csv, render_latex, render_markdown  # noqa: E402

HOSTILE = ["a|b", "x | y | z", "<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "=HYPERLINK(\"x\")",
           "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1", "'=1", "$x^2$", "$\\frac{$", "a^b~c", "50% & #1_{x}",
           "back\\slash", "line\nbreak", "\x1b[31mred", "`code` *em* _u_ [l](http://x)", "a\\|b", "|", "\\", "''",
           "--> <!--", "&amp;", "~~strike~~"]
NAMES = st.one_of(st.sampled_from(HOSTILE), st.text(
    st.one_of(st.sampled_from(string.punctuation + " \t\n\r\x1b\x00"), st.characters(codec="utf-8")),
    min_size=1, max_size=16).filter(lambda s: s.strip()))
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@pytest.fixture(scope="module")
def report(runs):
    return build_report(runs, num_resamples=200)


def renamed(report, a: str, b: str, dataset: str = "Nations"):
    """The report with its two runs named ``a`` and ``b`` (also their directories, dataset and comparison)."""
    out = copy.copy(report)
    out.runs = [dataclasses.replace(r, name=n, directory=Path(n), dataset=dataset) for r, n in zip(report.runs, (a, b))]
    out.comparison = [{**row, "model_a": a, "model_b": b} for row in report.comparison or []]
    return out


# ---------------------------------------------------------------------------------------------- Markdown
def gfm_cells(line: str) -> list[str]:
    """A GFM table row's cells as cmark-gfm reads them: split at each ``|`` not after a backslash, then
    backslash escapes of ASCII punctuation undone and the cell trimmed."""
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", p).strip() for p in parts]


def md_intended(name: str) -> str:
    return CONTROL.sub(" ", name).strip()


@FUZZ
@given(a=NAMES, b=NAMES)
def test_markdown_cells_are_the_names(report, a, b):
    md = render_markdown(renamed(report, a, b))
    assert not re.search(r"(?<!\\)<", md)  # no HTML tag can open
    table = [line for line in md.splitlines() if line.startswith("| ")]
    width = len(gfm_cells(table[0]))
    assert all(len(gfm_cells(line)) == width for line in table[:1 + sum(len(r.headline) for r in report.runs)])
    rows = [gfm_cells(line) for line in table[1:]]
    assert [r[0] for r in rows[:len(report.runs[0].headline)]] == [md_intended(a)] * len(report.runs[0].headline)
    numbers = [r[3] for r in rows[:len(report.runs[0].headline)]]
    assert numbers == [c[0] for c in (_cells(row) for row in report.runs[0].headline)]  # no column shifted
    headings = [line[3:] for line in md.splitlines() if line.startswith("## ")
                and line not in ("## Pairwise comparison", "## Notes", "## Reference")]
    assert [re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", h).strip() for h in headings] == [md_intended(a), md_intended(b)]


def _cells(row):
    from kgeval.report.text import cells

    return cells(row)


# ---------------------------------------------------------------------------------------------- LaTeX
_UNLATEX = {r"\textbackslash{}": "\\", r"\textasciitilde{}": "~", r"\textasciicircum{}": "^", r"\textless{}": "<",
            r"\textgreater{}": ">", r"\textbar{}": "|", "--": "—"}
_LATEX_TOKEN = re.compile("|".join(map(re.escape, _UNLATEX)) + r"|\\[&%$#_{}]|[-'`,!?]\{\}")


def latex_cells(line: str) -> list[str]:
    """A tabular row's cells as TeX reads them: split at each ``&`` not after a backslash, escapes undone
    in one pass (``\\textbackslash{}\\&`` is a backslash and an ampersand)."""
    body = line[:-len(r" \\")] if line.endswith(r" \\") else line
    return [_LATEX_TOKEN.sub(lambda m: _UNLATEX.get(m.group(), m.group()[1] if m.group()[0] == "\\" else m.group()[0]),
                             cell).strip() for cell in re.split(r"(?<!\\)&", body)]


#: what the LaTeX export writes itself (never from a name): numbers in math, intervals in \scriptsize, A $-$ B
_LATEX_OWN = re.compile(r"\\(textbackslash|textasciitilde|textasciicircum|textless|textgreater|textbar)\{\}|"
                        r"\\[&%$#_{}]|(?<=[-'`,!?])\{\}|\$-?[\d.]+ \\times 10\^\{-?\d+\}\$|\{\\scriptsize |\]\}|"
                        r"\$-\$|\(\$d_z\$\)")


@FUZZ
@given(a=NAMES, b=NAMES)
def test_latex_cells_are_the_names(report, a, b):
    tex = render_latex(renamed(report, a, b))
    tables = tex.split(r"\begin{tabular}")[1:]
    assert len(tables) == 2  # the runs' metrics, the comparison
    for i, table in enumerate(tables):
        rows = [line for line in table.splitlines() if line.endswith(r" \\") and not line.startswith(r"\multicolumn")]
        width = len(latex_cells(rows[0]))
        for line in rows:
            stripped = _LATEX_OWN.sub("", line[:-3])
            assert not re.search(r"[\\&%$#_{}^~]", stripped.replace("&", "", width - 1)), line  # nothing raw
            assert len(latex_cells(line)) == width
        # a name is the model cell of the metrics table, the A and B cells of the comparison
        columns = (0,) if i == 0 else (0, 1)
        named = [line for line in rows[1:] if "scriptsize" not in latex_cells(line)[1]]  # not a row of intervals
        assert len(named) == (2 if i == 0 else len(report.comparison))
        names = {latex_cells(line)[c] for line in named for c in columns}
        assert names == {CONTROL.sub(" ", a).strip(), CONTROL.sub(" ", b).strip()}
        for line in named:  # no ligature joins two characters of a name
            for c in columns:
                # (kgeval._escape writes an em dash as "--" itself: one character, not a ligature of two)
                cell = re.split(r"(?<!\\)&", line)[c].replace("--", "" if "\u2014" in a + b else "--")
                assert not re.search(r"--|''|``|,,|[!?]`", cell)
    # a dataset's name: the row of its group in each table
    groups = [line for line in render_latex(renamed(report, a, b, dataset=a)).splitlines()
              if line.startswith(r"\multicolumn")]
    assert len(groups) == 2
    for line in groups:
        inner = re.fullmatch(r"\\multicolumn\{\d+\}\{@\{\}l\}\{\\textit\{(.*)\}\} \\\\", line).group(1)
        assert not re.search(r"[\\&%$#_{}^~]", _LATEX_OWN.sub("", inner)), line
        assert latex_cells(inner) == [CONTROL.sub(" ", a).strip()]


# ---------------------------------------------------------------------------------------------- CSV
@FUZZ
@given(a=NAMES, b=NAMES)
def test_csv_has_no_formula_and_reads_back_the_names(report, a, b):
    rows = list(csv.reader(io.StringIO(render_csv(renamed(report, a, b)))))
    head = rows[0]
    assert all(len(r) == len(head) for r in rows)
    for r in rows[1:]:
        for cell in r:
            try:
                float(cell)
                continue  # a number: -0.5 is no formula
            except ValueError:
                assert not cell.startswith(CSV_FORMULA_START), r
    got = [(csv_value(r[head.index("run")]), csv_value(r[head.index("directory")])) for r in rows[1:]]
    assert set(got) == {(a, str(Path(a))), (b, str(Path(b)))}


# ---------------------------------------------------------------------------------------------- HTML
class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.runs, self.in_h2, self.h2 = set(), [], False, []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag == "section":
            self.runs.append(dict(attrs).get("data-run"))
        self.in_h2 = tag == "h2"

    def handle_endtag(self, tag):
        self.in_h2 = False

    def handle_data(self, data):
        if self.in_h2:
            self.h2.append(data)


@pytest.fixture(scope="module")
def clean_tags(report):
    parser = _Tags()
    parser.feed(render_html(report))
    return parser.tags


def test_html_of_tag_like_names_has_no_injected_tag(report, clean_tags):
    """The fast variant of the fuzz below (each page draws its figures: ~2 s): names made of tags and comments."""
    _assert_no_injected_tag(report, clean_tags, "<script>alert(1)</script>", "--> <img src=x onerror=alert(1)> <!--")


@pytest.mark.slow  # 8 pages with their figures
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=NAMES, b=NAMES)
def test_html_has_no_injected_tag(report, clean_tags, a, b):
    _assert_no_injected_tag(report, clean_tags, a, b)


def _assert_no_injected_tag(report, clean_tags, a, b):
    parser = _Tags()
    parser.feed(render_html(renamed(report, a, b, dataset=a)))
    # pattern: the SVG hatch of a series whose colour another of its figure has (two names, one palette colour)
    assert parser.tags <= clean_tags | {"pattern"}
    assert parser.runs == [a.replace("\r\n", "\n").replace("\r", "\n"), b.replace("\r\n", "\n").replace("\r", "\n")] \
        or parser.runs == [a, b]


# ---------------------------------------------------------------------------------------------- figures
@FUZZ
@given(name=NAMES)
def test_figure_labels_are_never_mathtext(name):
    from matplotlib.text import Text

    assert Text()._preprocess_math(mathtext_literal(name)) == (plain_text(name), False)


def test_a_dataset_named_as_broken_mathtext_draws(report):
    """Before: ``$\\frac{$`` as a dataset name ended in matplotlib's ValueError (a mathtext parse error)."""
    from kgeval.report import figures

    svg = figures.figure_one(renamed(report, "$x^2$ model", "b", dataset="$\\frac{$").runs, "mrr")
    assert svg.startswith("<svg")


# ---------------------------------------------------------------------------------------------- terminal tables
@FUZZ
@given(label=NAMES)
def test_terminal_table_rows_stay_rows(report, label):
    from kgeval.results.render import metric_table

    table = metric_table(report.runs[0].results, [(label, "mrr"), ("other", "hits@10")], footer=False)
    lines = table.splitlines()
    assert len(lines) == 4 and "\x1b" not in table and lines[2].startswith(plain_text(label))


def test_a_filter_set_name_cannot_break_the_protocol_lines():
    import kgeval
    from kgeval.data import get_dataset
    from kgeval.models import get_model

    ds = get_dataset("nations")
    model = get_model("distmult", ds.num_entities, ds.num_relations, dim=4, seed=0)
    res = kgeval.evaluate(model, ds.testing, filter_triples={"train\nfiltered: fake\x1b[2J": ds.training})
    lines = res.evaluation_protocol.describe().splitlines()
    assert sum(line.startswith("filtered:") for line in lines) == 1 and "\x1b" not in "".join(lines)
