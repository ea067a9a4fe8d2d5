"""The report as a paper's appendix (issue 32): four runs on two datasets render without horizontal
overflow at desktop and phone widths in chromium, name the split and the training configuration, show
relation labels, cite the paper, keep a model's colour across reports, and export a booktabs table."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from kgeval.cli import main
from kgeval.report.figures import PALETTE, model_colour
from kgeval.report.model import build_report
from kgeval.report.text import latex_number, render_latex

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("KGEVAL_REQUIRE_CHROMIUM"):
    raise RuntimeError("KGEVAL_REQUIRE_CHROMIUM is set but chromium is not installed")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def four_runs(tmp_path_factory):
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
def page(four_runs, tmp_path_factory):
    path = tmp_path_factory.mktemp("page") / "report.html"
    res = CliRunner().invoke(main, ["report", *map(str, four_runs), "-o", str(path), "--resamples", "200"])
    assert res.exit_code == 0, res.output
    return path


def test_the_page_names_split_configuration_labels_and_the_paper(page):
    html = page.read_text(encoding="utf-8")
    assert html.count("evaluated on the test split of") == 4
    assert html.count("trained: ") == 4 and "lcwa training, 1 epochs" in html
    from kgeval.data import get_dataset

    labels = list(get_dataset("nations").relation_to_id)
    assert sum(f"<td>{label}</td>" in html for label in labels) >= 10  # relation labels, not ids
    assert "Hoyt, C. T., Berrendorf, M., Galkin, M., Tresp, V., &amp; Gyori, B. M. (2022)" in html
    assert "seed 004" not in html.lower()
    assert "<meta name='viewport'" in html
    # warnings come after the summary (Figure 1 and the comparison), not before it
    if "<h2>Notes</h2>" in html:
        assert html.index("<h2>Notes</h2>") > html.index("data-figure=\"figure-one\"")


def test_the_comparison_is_compact(page):
    html = page.read_text(encoding="utf-8")
    table = html[html.index("<table class='comparison'>"):]
    header = table[:table.index("</tr>")]
    assert "model_a" not in header and "p_method" not in header and "effect_kind" not in header
    assert "test: permutation" in html  # what every row shares, said once above the table


@pytest.mark.service
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
@pytest.mark.parametrize("width", [1400, 400])
def test_no_horizontal_overflow(page, width, tmp_path):
    probe = tmp_path / "probe.html"
    probe.write_text(
        f"<html><body style='margin:0'><iframe id='f' src='{page.as_uri()}' style='width:{width}px;height:900px;"
        "border:0'></iframe><pre id='out'></pre><script>document.getElementById('f').onload = () => {"
        "const d = document.getElementById('f').contentDocument.documentElement;"
        "document.getElementById('out').textContent = 'scroll=' + d.scrollWidth + ' client=' + d.clientWidth; };"
        "</script></body></html>", encoding="utf-8")
    res = subprocess.run([CHROMIUM, *FLAGS, "--allow-file-access-from-files", "--virtual-time-budget=20000",
                          "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=300)
    found = re.search(r"scroll=(\d+) client=(\d+)", res.stdout)
    assert found, res.stdout[-2000:]
    scroll, client = map(int, found.groups())
    # the client width is the frame less a vertical scroll bar, if any; no horizontal overflow: scroll <= client
    assert width - 20 <= client <= width and scroll <= client, (scroll, client)


@pytest.mark.multiprocess
def test_a_model_keeps_its_colour():
    assert model_colour("complex") == model_colour("complex") and model_colour("complex") in PALETTE
    code = "from kgeval.report.figures import model_colour; print(model_colour('complex'))"
    # another process (another hash seed) gives the same colour
    out = subprocess.run(["python", "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "7"})
    assert out.stdout.strip() == model_colour("complex")
    assert len({model_colour(m) for m in ("transe", "distmult", "complex", "rotate", "tucker", "pairre")}) >= 4


def test_latex_is_booktabs_with_one_row_per_run(four_runs, tmp_path):
    tex = render_latex(build_report(four_runs, num_resamples=200))
    assert tex.count("\\begin{") == tex.count("\\end{") == 2
    assert [line for line in tex.splitlines() if line in ("\\toprule", "\\midrule", "\\bottomrule")] == \
        ["\\toprule", "\\midrule", "\\bottomrule"]
    body = tex[tex.index("\\midrule") + 8:tex.index("\\bottomrule")].strip().splitlines()
    assert len(body) == 4 and all(line.endswith("\\\\") for line in body)
    assert all(line.count("&") == 8 for line in body)  # the run and eight metric columns
    outside_math = re.sub(r"\$[^$]*\$", "", tex)
    assert "_" not in outside_math.replace("\\_", "")
    assert "\\times 10^{" in tex  # the p-values
    if os.environ.get("KGEVAL_REQUIRE_PDFLATEX") and not shutil.which("pdflatex"):
        raise AssertionError("KGEVAL_REQUIRE_PDFLATEX is set but pdflatex is not installed")
    if shutil.which("pdflatex"):
        doc = tmp_path / "t.tex"
        doc.write_text("\\documentclass{article}\\usepackage{booktabs}\\usepackage[margin=1cm,landscape]{geometry}"
                       "\\begin{document}\n" + tex + "\\end{document}\n", encoding="utf-8")
        res = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout[-3000:]


@pytest.mark.parametrize("value,text", [(0.50416, "0.5042"), (12345.6, "$1.235 \\times 10^{4}$"),
                                        (3.2e-7, "$3.2 \\times 10^{-7}$"), (0.0, "0"), (None, "--")])
def test_latex_numbers(value, text):
    assert latex_number(value) == text


def test_log_axes_have_plain_tick_labels():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kgeval.report.figures import plain_log_ticks

    fig, ax = plt.subplots()
    ax.plot([1, 10, 1000], [1, 2, 3])
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    plt.close(fig)
    assert "1,000" in labels and not any("10^" in t or "$" in t for t in labels), labels
