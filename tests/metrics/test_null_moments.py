"""One null-moment path: Metric.null_moments, DerivedMetric.moments/adjust, Results caching."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kgeval import metrics
from kgeval.metrics import DerivedMetric, NullMoments
from kgeval.metrics.base import check_weights
from kgeval.ranks import RankTable
from kgeval.results import Results

C = np.array([5, 9, 14, 3, 30, 7])
W = check_weights([1.0, 2.0, 0.5, 1.0, 3.0, 1.5], C.size)
RANKS = np.array([1.0, 3.0, 2.5, 3.0, 11.0, 1.0])


@pytest.mark.parametrize("m", metrics.default_metrics(), ids=lambda m: m.key)
@pytest.mark.parametrize("w", [None, W], ids=["unweighted", "weighted"])
def test_null_moments_agree_with_public_accessors(m, w):
    nm = m.null_moments(C, w)
    assert isinstance(nm, NullMoments)
    if nm.mean is not None:
        assert m.expected_value(C, w) == nm.mean
    if nm.variance is not None:
        assert m.variance(C, w) == nm.variance


@pytest.mark.parametrize("m", [m for m in metrics.default_metrics() if isinstance(m, DerivedMetric)], ids=lambda m: m.key)
def test_derived_is_affine_in_its_base(m):
    """adjust/moments use only the base's NullMoments, and agree with evaluating the wrapper directly."""
    base = m.base.null_moments(C, None)
    if m.coefficients(base) is None:
        return
    shift, scale = m.coefficients(base)
    v = m.base.compute(RANKS, C, None)
    assert m.adjust(v, base) == pytest.approx((v - shift) / scale if scale else 0.0, rel=1e-14, abs=0)
    assert m(RANKS, C) == m.adjust(v, base)
    moments = m.moments(base)
    assert moments == m.null_moments(C, None)
    assert moments.exact == base.exact
    assert moments.mean == pytest.approx({"norm": 1.0, "index": 0.0, "z": 0.0}[m.kind], abs=1e-12)


def test_metrics_without_moments_say_so():
    for key in ("std", "variance", "mad", "inverse_median_rank"):
        assert metrics.get(key).null_moments(C, None) == NullMoments(None, None, False)
    med = metrics.get("median_rank").null_moments(C, None)
    assert med.mean is not None and med.variance is None and med.exact
    assert metrics.get("median_rank").null_moments(C, W).mean is None  # weighted median: unknown
    approx = metrics.get("power_mean_rank", p=2).null_moments(C, None)
    assert approx.mean is not None and not approx.exact


def test_no_hidden_memo_on_metric_instances():
    """E and Var come together, so nothing is cached on the instance between calls."""
    m = metrics.get("hmr")
    first = m.null_moments(C, None)
    assert vars(m) == {} or "_memo" not in vars(m)
    assert m.null_moments(C[:3], None) != first


def test_results_computes_each_base_moment_once(monkeypatch):
    """One NullMoments per (side, base metric), however many wrappers and rank types use it."""
    calls = []
    orig = metrics.InverseHarmonicMeanRank._null_moments

    def counting(self, c, w):
        calls.append(c.size)
        return orig(self, c, w)

    monkeypatch.setattr(metrics.InverseHarmonicMeanRank, "_null_moments", counting)
    table = RankTable.from_ranks([1, 2, 3, 4], [1, 3, 3, 6], num_candidates=[9, 9, 8, 8], side=[0, 0, 1, 1])
    Results(table)
    assert len(calls) == 3  # head, tail, both


def test_huge_relative_weights_give_finite_metrics():
    """Weights are relative: 1e308 each behaves like 1 each (was NaN for every metric)."""
    w = np.full(C.size, 1e308)
    for m in metrics.default_metrics():
        if m.key == "adjusted_median_rank_index":  # no expectation for the weighted median
            continue
        ref = m(RANKS, C, None)
        assert m(RANKS, C, w) == pytest.approx(ref, rel=1e-12, abs=1e-15), m.key
        nm, ref_nm = m.null_moments(C, check_weights(w, C.size)), m.null_moments(C, None)
        if ref_nm.mean is not None and m.key != "median_rank":
            assert math.isfinite(nm.mean) and nm.mean == pytest.approx(ref_nm.mean, rel=1e-9), m.key
    res = Results(RankTable.from_ranks([1, 2, 3], num_candidates=[5, 5, 5], weights=[1e308, 1e308, 1e308]))
    assert all(math.isfinite(v) for v in res.to_flat_dict().values())


@pytest.mark.multiprocess  # a fresh interpreter
def test_default_result_does_not_import_scipy_stats():
    """Importing scipy.stats (for the median's normal approximation) cost 1-2 s on the first call
    in every process, more than the whole result; it is only needed for Monte Carlo intervals."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, numpy as np\n"
        "from kgeval.ranks import RankTable\nfrom kgeval.results import Results\n"
        "rng = np.random.default_rng(0); c = rng.integers(50, 2000, 3001)\n"
        "Results(RankTable.from_ranks(np.minimum(rng.integers(1, 40, 3001), c), num_candidates=c,"
        " side=np.arange(3001) % 2))\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "False"
