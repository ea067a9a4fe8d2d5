"""The report as a paper's appendix (issue 32): four runs on two datasets render without horizontal
overflow at desktop and phone widths in chromium (measured in the DOM), name the split, the filter sets,
the rank type and the training configuration of each run, show relation and entity labels, compare the
models in one compact table grouped by dataset, put the notes below the summary in the terms of the
interface that made the report, cite the paper, keep a model's colour across reports, label log axes
plainly, and export booktabs LaTeX that compiles (checked structurally everywhere, with pdflatex where
it is installed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner
from patience import scaled

from kgeval.cli import main
from kgeval.errors import UnknownNameError
from kgeval.report.figures import PALETTE, model_colour, series_styles
from kgeval.report.html import render_html
from kgeval.report.model import build_report
from kgeval.report.text import latex_number, latex_p, render_latex, render_markdown

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("KGEVAL_REQUIRE_CHROMIUM"):
    raise RuntimeError("KGEVAL_REQUIRE_CHROMIUM is set but chromium is not installed")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
RESAMPLES = "200"


@pytest.fixture(scope="module")
def four_runs(tmp_path_factory):
    """DistMult and ComplEx on Nations and on Kinships, one epoch each."""
    root = tmp_path_factory.mktemp("four")
    runs = []
    for dataset in ("nations", "kinships"):
        for model in ("distmult", "complex"):
            out = root / f"{model}-{dataset}"
            res = CliRunner().invoke(main, ["pipeline", "-d", dataset, "-m", model, "--epochs", "1", "-o", str(out)])
            assert res.exit_code == 0, res.output
            runs.append(out)
    return runs


@pytest.fixture(scope="module")
def report(four_runs):
    return build_report(four_runs, num_resamples=int(RESAMPLES))


@pytest.fixture(scope="module")
def page(four_runs, tmp_path_factory):
    path = tmp_path_factory.mktemp("page") / "report.html"
    res = CliRunner().invoke(main, ["report", *map(str, four_runs), "-o", str(path), "--resamples", RESAMPLES])
    assert res.exit_code == 0, res.output
    return path


class _Cells(HTMLParser):
    """The text of every table cell by table class, row by row, and each run section's setup rows."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.setup: dict[str, dict[str, str]] = {}
        self.group_rows: dict[str, list[str]] = {}
        self._table = self._row = self._cell = self._run = self._setup = None
        self._group = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self._run = a.get("data-run")
            self.setup[self._run] = {}
        elif tag == "table":
            self._table = a.get("class", "")
            self.tables.setdefault(self._table, [])
        elif tag == "tr":
            self._row, self._setup, self._group = [], a.get("data-setup"), a.get("class") == "group"
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._group:
                self.group_rows.setdefault(self._table, []).append(self._row[0])
            else:
                self.tables[self._table].append(self._row)
            if self._setup and self._run is not None:
                self.setup[self._run][self._setup] = self._row[-1]
            self._row = None
        elif tag == "table":
            self._table = None


def _cells(html: str) -> _Cells:
    parser = _Cells()
    parser.feed(html)
    return parser


# ---------------------------------------------------------------------------------------------- content
def test_each_run_names_its_split_filters_rank_type_and_configuration(page):
    html = page.read_text(encoding="utf-8")
    setup = _cells(html).setup
    assert len(setup) == 4
    for run, rows in setup.items():
        model, dataset = run.split(" on ")
        assert rows["evaluated"].startswith(f"the test split of {dataset}: ")
        assert "head and tail prediction" in rows["evaluated"] and "ranking tasks" in rows["evaluated"]
        assert rows["candidates"].startswith("filtered: ") and "training" in rows["candidates"] \
            and "validation" in rows["candidates"] and "test" in rows["candidates"]
        assert rows["ranks"].startswith("realistic: ") and "ties count half" in rows["ranks"]
        assert rows["model"].startswith(f"{model}, dim ")
        assert rows["training"].startswith("lcwa, 1 epoch,") and "batch size" in rows["training"]
        assert rows["optimizer"].startswith("adam, learning rate ") and rows["seed"] == "42"
    assert "1 epochs" not in html


def test_relations_and_entities_carry_their_labels(page, report):
    from kgeval.data import get_dataset

    html = page.read_text(encoding="utf-8")
    cells = _cells(html)
    nations = get_dataset("nations")
    relations = {row[0] for row in cells.tables["relations"]}
    assert len(relations & set(nations.relation_labels)) >= 10  # labels, not ids
    assert not any(r.isdigit() for r in relations)
    examples = cells.tables["examples"]
    assert len(examples) == 4 * (1 + 5)  # a header and five worst-ranked tasks per run
    entities = set(nations.entity_labels) | set(get_dataset("kinships").entity_labels)
    rows = [row for row in examples if row[0] != "head"]
    assert all(row[0] in entities and row[2] in entities for row in rows)
    # the worst-ranked tasks are those whose rank is the largest share of the candidates
    for run in report.runs:
        shares = [ex["rank"] / ex["num_candidates"] for ex in run.examples]
        assert shares == sorted(shares, reverse=True)
        table = run.results.rank_table
        worst = max(r / c for r, c in zip(table.ranks("realistic"), table.num_candidates))
        assert shares[0] == pytest.approx(worst)


def test_a_dataset_without_labels_shows_ids(four_runs, monkeypatch):
    """Ids only where the dataset has no labels of its own, or where the dataset found by the run's name is not
    the one it used (its split hashes differ): a label must be that id's label in the run's own data."""
    from kgeval.report import model

    real = model.dataset_labels

    def unlabelled(*args, **kwargs):
        labels = real(*args, **kwargs)
        return model.Labels(triples=labels.triples)

    monkeypatch.setattr(model, "dataset_labels", unlabelled)
    run = build_report(four_runs[:1], num_resamples=int(RESAMPLES)).runs[0]
    assert all(r["relation"] == str(r["relation_id"]) for r in run.relations)
    assert len(run.examples) == 5 and all(ex["head"].isdigit() and ex["tail"].isdigit() and ex["relation"].isdigit()
                                          for ex in run.examples)
    other = real("nations", {"testing": "0" * 64})
    assert other.relations == other.entities == {} and "split hashes differ" in other.why
    assert real("nations").relations[0] == "accusation"


def test_the_summary_has_models_as_rows_grouped_by_dataset(page):
    html = page.read_text(encoding="utf-8")
    cells = _cells(html)
    summary = cells.tables["summary"]
    assert summary[0] == ["model", "MRR", "Hits@1", "Hits@3", "Hits@10", "MR", "adjusted MRR", "z (MRR)", "p (MRR)"]
    assert [row[0] for row in summary[1:]] == ["distmult", "complex", "distmult", "complex"]
    # smallest dataset first, as Figure 1 orders them; what each dataset's runs share in its group row
    assert cells.group_rows["summary"] == ["Nations: test split, 201 evaluation triples, filtered",
                                           "Kinships: test split, 1,074 evaluation triples, filtered"]
    assert all(re.fullmatch(r"0\.\d{4}\[0\.\d{4}, [01]\.\d{4}\]", row[1]) for row in summary[1:])  # value and CI


def test_the_comparison_is_compact_and_grouped_by_dataset(page):
    html = page.read_text(encoding="utf-8")
    cells = _cells(html)
    header, *rows = cells.tables["comparison"]
    assert header == ["A", "B", "metric", "value A", "value B", "A − B", "95% CI", "p (Holm)", "effect (d_z)"]
    assert len(rows) == 8 and {(r[0], r[1]) for r in rows} == {("distmult", "complex")}
    assert cells.group_rows["comparison"] == ["Nations: 201 evaluation triples", "Kinships: 1,074 evaluation triples"]
    # what every row shares, said once above the table in words (no snake_case, no raw field names)
    constant = re.search(r"<p class='constant'>(.*?)</p>", html).group(1)
    assert constant == ("All rows: paired permutation test; Monte Carlo p-values; effect size: Cohen&#x27;s d_z of "
                        "the per-triple differences; resampling evaluation triples.")
    shown = re.sub(r"<[^>]*>", " ", html[html.index("<h2>Pairwise comparison</h2>"):html.index("<h2>Notes")])
    for raw in ("model_a", "p_method", "effect_kind", "num_units", "cohen d_z (units)", "monte carlo", "on Nations"):
        assert raw not in shown  # the text people read; the data- attributes keep the exact names


def test_notes_come_below_the_summary_in_the_interfaces_terms(page, four_runs):
    html = page.read_text(encoding="utf-8")
    order = [html.index(mark) for mark in ("<h2>Summary</h2>", 'data-figure="figure-one"', "<h2>Pairwise comparison",
                                           "<h2>Notes", "<section class='run'", "<h2>Reference</h2>")]
    assert order == sorted(order)
    python = build_report(four_runs[:2], num_resamples=int(RESAMPLES))
    cli = build_report(four_runs[:2], num_resamples=int(RESAMPLES), interface="cli")
    assert python.interface == "python" and cli.interface == "cli" and len(python.notes) == len(cli.notes) > 0
    for p_note, c_note in zip(python.notes, cli.notes):
        assert "num_resamples=" in p_note and "--resamples" not in p_note and "method=" not in p_note
        assert "--resamples " in c_note and "num_resamples" not in c_note and "method=" not in c_note
        assert re.sub(r"num_resamples=(\d+)", r"--resamples \1", p_note) == c_note
    # the line that remakes the report, in the same terms
    assert "kgeval.report.build_report([" in render_html(python) and "num\\_resamples=200" in render_markdown(python)
    assert "kgeval report " in render_html(cli) and "--resamples 200" in render_html(cli)
    with pytest.raises(UnknownNameError):
        build_report(four_runs[:1], interface="shell")


def test_the_paper_is_cited_and_the_page_has_a_viewport(page):
    html = page.read_text(encoding="utf-8")
    assert ("Hoyt, C. T., Berrendorf, M., Galkin, M., Tresp, V., &amp; Gyori, B. M. (2022). A Unified Framework for "
            "Rank-based Evaluation Metrics for Link Prediction in Knowledge Graphs. arXiv:2203.07544.") in html
    assert "@article{hoyt2022unified," in html and "Figure 1 of Hoyt et al. (2022)" in html
    assert "seed 004" not in html.lower()
    assert "<meta name='viewport' content='width=device-width, initial-scale=1'>" in html


# ---------------------------------------------------------------------------------------------- browser
_PROBE = """<html><body style='margin:0'><iframe id='f' src='{src}' style='width:{width}px;height:900px;border:0'>
</iframe><pre id='out'></pre><script>
document.getElementById('f').onload = () => {{
  const doc = document.getElementById('f').contentDocument, root = doc.documentElement;
  const view = root.clientWidth;
  // every box whose right edge passes the page's, outside a scroll box: what would widen the page
  const outside = [...doc.body.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right > view + 0.5
      && !e.closest('.scroll')).map(e => e.tagName + '.' + e.className);
  const scrolling = [...doc.querySelectorAll('.scroll')].filter(e => e.scrollWidth > e.clientWidth + 1)
      .map(e => (e.querySelector('table') || e.closest('figure') || e).className || e.closest('figure').dataset.figure);
  const figures = [...doc.querySelectorAll('figure svg')].map(s => Math.round(s.getBoundingClientRect().width));
  document.getElementById('out').textContent = JSON.stringify({{scroll: root.scrollWidth, client: view,
      inner: document.getElementById('f').contentWindow.innerWidth, outside: outside, scrolling: scrolling,
      figures: figures}});
}};
</script></body></html>"""


def _measure(page, width: int, tmp_path) -> dict:
    probe = tmp_path / f"probe{width}.html"
    probe.write_text(_PROBE.format(src=page.as_uri(), width=width), encoding="utf-8")
    res = subprocess.run([CHROMIUM, *FLAGS, "--allow-file-access-from-files", "--virtual-time-budget=20000",
                          "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=scaled(300))
    found = re.search(r"<pre id=\"out\">(.*?)</pre>", res.stdout, re.S)
    assert found and found.group(1), res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.service
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
@pytest.mark.parametrize("width", [1400, 400])
def test_no_horizontal_overflow(page, width, tmp_path):
    m = _measure(page, width, tmp_path)
    # the client width is the frame less a vertical scroll bar, if any; no horizontal overflow of the page
    assert width - 20 <= m["client"] <= width and m["inner"] == width, m
    assert m["scroll"] <= m["client"], m
    assert m["outside"] == [], m  # nothing sticks out of the page but inside a scroll box
    assert len(m["figures"]) == 1 + 4 * 3 and min(m["figures"]) > 200, m  # every figure drawn, none shrunk away
    if width == 400:  # the wide tables scroll in their boxes, Figure 1 keeps a legible width and scrolls
        assert {"summary", "comparison", "headline"} <= set(m["scrolling"]), m
        assert max(m["figures"]) >= 700, m
    else:
        assert "summary" not in m["scrolling"] and "comparison" not in m["scrolling"], m


@pytest.mark.service
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_long_names_do_not_widen_the_phone_page(report, tmp_path):
    """A run, dataset and directory name of 150 characters without a space: headings and paragraphs break
    it, tables scroll."""
    import copy
    import dataclasses
    from pathlib import Path

    long = copy.copy(report)
    names = ["m" * 150 + str(i) for i in range(len(report.runs))]
    long.runs = [dataclasses.replace(r, name=n, directory=Path("/" + "d" * 150), dataset="D" * 150)
                 for r, n in zip(report.runs, names)]
    long.comparison = []
    path = tmp_path / "long.html"
    path.write_text(render_html(long), encoding="utf-8")
    m = _measure(path, 400, tmp_path)
    assert m["scroll"] <= m["client"] and m["outside"] == [], m


@pytest.mark.service
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_phone_screenshot_is_a_drawn_page(page, tmp_path):
    shot = tmp_path / "phone.png"
    res = subprocess.run([CHROMIUM, *FLAGS, "--hide-scrollbars", f"--screenshot={shot}", "--window-size=400,2400",
                          page.as_uri()], capture_output=True, text=True, timeout=scaled(300))
    assert res.returncode == 0, res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 40_000


# ---------------------------------------------------------------------------------------------- colours, axes
@pytest.mark.multiprocess
def test_a_model_keeps_its_colour():
    assert model_colour("complex") == model_colour("complex") and model_colour("complex") in PALETTE
    code = "from kgeval.report.figures import model_colour; print(model_colour('complex'))"
    # another process (another hash seed) gives the same colour
    out = subprocess.run(["python", "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "7"})
    assert out.stdout.strip() == model_colour("complex")
    assert len({model_colour(m) for m in ("transe", "distmult", "complex", "rotate", "tucker", "pairre")}) >= 4


def test_a_model_has_its_colour_in_every_report_and_figure(page, runs, tmp_path):
    """The same colour for DistMult in the four-run report and in a two-run report of other runs, in the
    tables' swatches and the figures' fills; two models of one palette colour are told apart by a hatch."""
    other = tmp_path / "other.html"
    res = CliRunner().invoke(main, ["report", *map(str, runs), "-o", str(other), "--resamples", RESAMPLES])
    assert res.exit_code == 0, res.output
    for html in (page.read_text(encoding="utf-8"), other.read_text(encoding="utf-8")):
        for model in ("distmult", "complex"):
            colour = model_colour(model)
            assert f"<span class='swatch' style='background:{colour}'></span>{model}" in html
            figure = html[html.index('data-figure="figure-one"'):]
            assert f"fill: {colour}" in figure[:figure.index("</figure>")]
    same = [m for m in ("transe", "distmult", "complex", "rotate", "tucker", "pairre", "rescal", "hole", "conve",
                        "mure", "boxe", "quate") if model_colour(m) == model_colour("distmult")]
    styles = series_styles(["distmult", *same[1:2]] if len(same) > 1 else ["distmult", "distmult2"])
    assert len(set(styles.values())) == len(styles)


def test_log_axes_have_plain_tick_labels():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kgeval.report.figures import plain_log_ticks

    for low, high, want in ((1, 1000, "1,000"), (1, 15, "5"), (85, 103, "90"), (2, 7, "5")):
        fig, ax = plt.subplots()
        ax.plot([low, high], [1, 2])
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        fig.canvas.draw()
        ticks = ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)
        labels = [t.get_text() for t in ticks if t.get_text()]
        plt.close(fig)
        # within a decade matplotlib labelled the minor ticks 9 x 10^1: now plain numbers
        assert want in labels and not any("10^" in t or "$" in t or "times" in t for t in labels), (low, high, labels)


# ---------------------------------------------------------------------------------------------- LaTeX
def _latex_tables(tex: str) -> list[str]:
    return re.findall(r"\\begin\{tabular\}.*?\\end\{tabular\}", tex, re.S)


def _body_rows(table: str) -> list[list[str]]:
    lines = table.splitlines()
    body = lines[lines.index(r"\midrule") + 1:lines.index(r"\bottomrule")]
    return [[c.strip() for c in re.split(r"(?<!\\)&", line[:-3])] for line in body if line.endswith(r" \\")]


def test_latex_is_booktabs_with_one_row_per_model(report, tmp_path):
    tex = render_latex(report)
    # balanced environments, each closed in order
    stack = []
    for kind, env in re.findall(r"\\(begin|end)\{(\w+\*?)\}", tex):
        if kind == "begin":
            stack.append(env)
        else:
            assert stack and stack.pop() == env, env
    assert not stack and Counter(re.findall(r"\\begin\{(\w+)\}", tex)) == {"table": 2, "tabular": 2}
    tables = _latex_tables(tex)
    for table in tables:  # booktabs: one top and one bottom rule, mid rules between, no vertical rules or \hline
        rules = [line for line in table.splitlines() if line in (r"\toprule", r"\midrule", r"\bottomrule")]
        assert rules[0] == r"\toprule" and rules[-1] == r"\bottomrule" and set(rules[1:-1]) == {r"\midrule"}
        assert r"\hline" not in table and "|" not in table.splitlines()[0]
    # the metrics: one row per model (grouped by dataset, the dataset named on its first row), metrics as columns
    header = tables[0].splitlines()[2]
    assert header == r"Model & MRR & Hits@1 & Hits@3 & Hits@10 & MR & Adj. MRR & z & p \\"
    rows = _body_rows(tables[0])
    groups = [r[0] for r in rows if len(r) == 1]  # a dataset's row: \multicolumn{9}{@{}l}{\textit{Nations}}
    assert groups == [r"\multicolumn{9}{@{}l}{\textit{Nations}}", r"\multicolumn{9}{@{}l}{\textit{Kinships}}"]
    rows = [r for r in rows if len(r) > 1]
    models, intervals = rows[0::2], rows[1::2]  # each model's row, and beneath it its intervals
    assert [r[0] for r in models] == ["distmult", "complex", "distmult", "complex"]
    assert len(rows) == 8 and all(len(r) == 9 for r in rows) and all(r[0] == "" for r in intervals)
    number = r"(-?\d+\.\d+|\$-?\d\.\d+ \\times 10\^\{-?\d+\}\$)"
    for r, below in zip(models, intervals):
        for cell, interval in zip(r[1:6], below[1:6]):  # each value with its interval
            assert re.fullmatch(number, cell) and re.fullmatch(r"\{\\scriptsize \[" + number + ", " + number + r"\]\}",
                                                               interval), (cell, interval)
        assert re.fullmatch(number, r[6]) and re.fullmatch(number, r[7]) and below[6:] == ["", "", ""]
    # p-values one way: four decimals down to 0.001, m.m x 10^{k} below; the same in both tables
    p_form = r"0\.\d{4,}|1\.0000|\$\d\.\d \\times 10\^\{-\d+\}\$"
    comparison = _body_rows(tables[1])
    assert [r[0] for r in comparison if len(r) == 1] == [r"\multicolumn{6}{@{}l}{\textit{Nations}}",
                                                         r"\multicolumn{6}{@{}l}{\textit{Kinships}}"]
    comparison = [r for r in comparison if len(r) > 1]
    assert len(comparison) == 8 and {(r[0], r[1]) for r in comparison} == {("distmult", "complex")}
    assert [r[2] for r in comparison[:4]] == ["MRR (higher better)", "Hits@10 (higher better)", "MR (lower better)",
                                              "GMR (lower better)"]
    for cell in [r[8] for r in models] + [r[4] for r in comparison]:
        assert re.fullmatch(p_form, cell), cell
    assert r"\times 10^{" in tex
    # no raw underscore (nor other special character) outside math and comments
    text = re.sub(r"\$[^$]*\$", "", "\n".join(line for line in tex.splitlines() if not line.startswith("%")))
    assert not re.search(r"(?<!\\)[_^#~]", text) and not re.search(r"(?<!\\)%", text)
    assert "Hoyt et al.\\ (2022, arXiv:2203.07544)" in tex and "@article{hoyt2022unified" in tex
    _pdflatex(tex, tmp_path)


def _pdflatex(tex: str, tmp_path) -> None:
    if os.environ.get("KGEVAL_REQUIRE_PDFLATEX") and not shutil.which("pdflatex"):
        raise AssertionError("KGEVAL_REQUIRE_PDFLATEX is set but pdflatex is not installed")
    if not shutil.which("pdflatex"):
        pytest.skip("pdflatex is not installed (Debian: texlive-latex-base texlive-latex-recommended); "
                    "the LaTeX was checked structurally")
    doc = tmp_path / "t.tex"
    doc.write_text("\\documentclass{article}\\usepackage{booktabs}\\usepackage[margin=1cm,landscape]{geometry}"
                   "\\begin{document}\n" + tex + "\\end{document}\n", encoding="utf-8")
    res = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                         capture_output=True, text=True, timeout=scaled(300))
    assert res.returncode == 0, res.stdout[-3000:]
    assert (tmp_path / "t.pdf").stat().st_size > 1000
    assert "Overfull \\hbox" not in res.stdout, res.stdout[-3000:]  # fits a landscape page


@pytest.mark.parametrize("value,text", [(0.50416, "0.5042"), (0.637, "0.6370"), (3.865, "3.865"), (217.48, "217.5"),
                                        (1074.0, "1074"), (12345.6, "$1.235 \\times 10^{4}$"),
                                        (3.2e-7, "$3.2 \\times 10^{-7}$"), (9.99996e-5, "$1 \\times 10^{-4}$"),
                                        (0.99996, "0.99996"), (0.0, "0"), (None, "--"), (float("nan"), "--")])
def test_latex_numbers(value, text):
    assert latex_number(value) == text


@pytest.mark.parametrize("row,text", [({"p": 0.0199}, "0.0199"),
                                      ({"p": 2.4e-58, "log10_p": None}, "$2.4 \\times 10^{-58}$"),
                                      ({"p": 0.0, "log10_p": -4241.3}, "$5.0 \\times 10^{-4242}$"),
                                      ({"p": 0.0}, "0"), ({"p": None}, "--"), ({"p": 0.99998}, "0.99998")])
def test_latex_p_values_print_as_every_table_prints_them(row, text):
    assert latex_p(row) == text
