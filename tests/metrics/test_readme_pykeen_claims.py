"""The README's "Where kgeval deliberately differs from PyKEEN 1.11.1" claims, checked against the
installed PyKEEN (skipped without it). The README once said PyKEEN 1.11.1's median expectation was
a closed form using the upper median (1.11.1 has none; the closed form is on PyKEEN's master branch),
that its Var[GMR] was off by 1.1e-6 relative (9.4e-7) and implied IGMR moments it does not have.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from kgeval import metrics

P = pytest.importorskip("pykeen.metrics.ranking")
pytestmark = pytest.mark.skipif(
    __import__("pykeen").get_version() != "1.11.1", reason="the README's claims are about PyKEEN 1.11.1"
)

# the claims moved from the README to the documentation site's page on the differences
README = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "differences.md").read_text(encoding="utf-8")
REFERENCE_FILE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "metrics-pykeen-1.11.1.json"


def _section() -> str:
    return README


def test_pykeen_has_no_median_or_igmr_null_moments():
    c = np.array([3, 4, 5, 6])
    for cls in (P.MedianRank, P.InverseGeometricMeanRank):
        for method in ("expected_value", "variance"):
            with pytest.raises(P.NoClosedFormError):
                getattr(cls(), method)(num_candidates=c)
    assert "PyKEEN 1.11.1 has none" in _section() and "no IGMR expectation" in _section()


def test_median_expectation_is_the_mean_of_the_two_middle_order_statistics():
    c = np.array([3, 4, 5, 6])  # even n: enumerate all 360 equally likely rank vectors
    grid = np.array(list(itertools.product(*(range(1, k + 1) for k in c))), dtype=float)
    exact = float(np.median(grid, axis=1).mean())
    upper = float(np.sort(grid, axis=1)[:, 2].mean())
    assert metrics.get("median_rank").expected_value(c) == pytest.approx(exact, rel=1e-12)
    assert abs(exact - upper) > 0.1  # the upper median would be another number
    assert np.median(grid[0]) == P.MedianRank()(grid[0])  # PyKEEN's own median is the same statistic


def test_integer_weighted_inverse_median_rank():
    ranks, weights = np.array([4, 4, 4]), np.ones(3)
    assert P.InverseMedianRank()(ranks, weights=weights) == 0  # PyKEEN: integer reciprocal of 4
    assert metrics.get("inverse_median_rank")(ranks, weights=weights) == 0.25


@pytest.mark.skipif(not REFERENCE_FILE.exists(), reason="needs ../shared/reference")
def test_gmr_variance_error_is_the_documented_one():
    case = next(c for c in json.loads(REFERENCE_FILE.read_text())["cases"] if c["name"] == "large")
    c = np.array(case["num_candidates"])
    ours = metrics.get("geometric_mean_rank").variance(c)
    theirs = P.GeometricMeanRank().variance(num_candidates=c)
    rel = abs(theirs - ours) / ours
    assert f"{rel:.1e}".replace("e-07", "·10⁻⁷") in _section()  # 9.4·10⁻⁷ as printed in the README
