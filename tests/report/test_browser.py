"""The HTML report rendered by a real browser (headless chromium): the numbers in the page are
the runs' results.json values, and every figure is drawn. Skipped only when chromium is absent,
and failed instead when KGEVAL_REQUIRE_CHROMIUM is set (.ci/run installs it and sets it)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from html.parser import HTMLParser

import pytest
from patience import scaled
from click.testing import CliRunner

from kgeval.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("KGEVAL_REQUIRE_CHROMIUM"):
    raise RuntimeError("KGEVAL_REQUIRE_CHROMIUM is set but chromium is not installed")
pytestmark = [pytest.mark.service, pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


class _Page(HTMLParser):
    """Numbers (data-key / data-run / data-value) and figures (their SVG path count) of the DOM."""

    def __init__(self):
        super().__init__()
        self.numbers, self.figures, self._figure = [], {}, None
        self.comparison, self._row = [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-key" in a and "data-value" in a:
            self.numbers.append((a.get("data-run"), a["data-key"], a["data-value"]))
        if tag == "tr":
            self._row = {}
        if "data-column" in a and self._row is not None:
            self._row[a["data-column"]] = a.get("data-value")
        if tag == "figure":
            self._figure = a["data-figure"]
            self.figures[self._figure] = 0
        elif self._figure and tag in ("path", "use"):
            self.figures[self._figure] += 1

    def handle_endtag(self, tag):
        if tag == "tr" and self._row:
            self.comparison.append(self._row)
        if tag == "figure":
            self._figure = None


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "report.html"
    res = CliRunner().invoke(main, ["report", *map(str, runs), "-o", str(path)])
    assert res.exit_code == 0, res.output
    return path


def _chromium(*args, cwd):
    return subprocess.run([CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=scaled(300), cwd=cwd)


def test_rendered_numbers_are_the_runs_results(runs, report):
    dom = _chromium("--dump-dom", report.as_uri(), cwd=report.parent)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = _Page()
    page.feed(dom.stdout)
    expected = {f"{model} on Nations": json.loads((d / "results.json").read_text())["metrics"]
                for model, d in zip(("distmult", "complex"), runs)}
    checked = set()
    for run, key, value in page.numbers:
        assert float(value) == expected[run][key], (run, key)
        checked.add((run, key))
    for run in expected:  # the headline of each run is there, adjusted and z included
        for key in ("both.realistic.inverse_harmonic_mean_rank", "both.realistic.adjusted_inverse_harmonic_mean_rank",
                    "both.realistic.z_inverse_harmonic_mean_rank", "head.realistic.hits_at_10",
                    "tail.realistic.arithmetic_mean_rank", "both.realistic.p_inverse_harmonic_mean_rank"):
            assert (run, key) in checked
    # the pairwise comparison: DistMult vs ComplEx on four metrics, their values the runs' own
    assert len(page.comparison) == 4
    mrr = next(r for r in page.comparison if "p_corrected" in r and r["difference"] is not None
               and abs(float(r["value_a"]) - expected["distmult on Nations"]["both.realistic.inverse_harmonic_mean_rank"]) < 1e-12)
    assert float(mrr["value_b"]) == pytest.approx(expected["complex on Nations"]["both.realistic.inverse_harmonic_mean_rank"])
    assert 0 < float(mrr["p_corrected"]) <= 1
    # Figure 1, and per run: ranks, candidates, relations
    assert set(page.figures) == {"figure-one"} | {f"{f}-{i}" for f in ("ranks", "candidates", "relations")
                                                   for i in range(2)}
    assert all(n > 10 for n in page.figures.values()), page.figures


def test_screenshot_is_a_drawn_page(report):
    shot = report.parent / "shot.png"
    res = _chromium(f"--screenshot={shot}", "--window-size=1200,3000", report.as_uri(), cwd=report.parent)
    assert res.returncode == 0, res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 3000)
    assert len(data) > 50_000  # a blank page of that size compresses to a few kB
