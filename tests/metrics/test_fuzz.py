"""Fuzzing the metric entry points (issue 7): a correct value or InvalidInputError /
UnknownNameError / NoClosedFormError, never another exception, never NaN."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgeval import metrics
from kgeval.errors import InvalidInputError, NoClosedFormError, UnknownNameError
from kgeval.keys import parse_key
from kgeval.results import Results

CI = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REFUSALS = (InvalidInputError, UnknownNameError, NoClosedFormError)
METRICS = metrics.default_metrics()
NAME_PARTS = st.sampled_from(["hits", "h@", "@", "_at_", "k", ".", "z_", "adjusted_", "mrr", "power_mean_rank_p", "neg",
                              "best", "head", "9" * 25, "0", "1", "_", "-", " ", "pmr", "é", "\x00"])


@CI
@given(name=st.one_of(st.text(max_size=30), st.lists(NAME_PARTS, max_size=6).map("".join)))
def test_names_and_keys(name):
    for lookup in (metrics.get, parse_key):
        try:
            lookup(name)
        except REFUSALS:
            pass


NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70))
# huge numbers of candidates (O(max C) prefix sums) are the numerics tests' subject (issue 7 item 11)
CANDIDATES = st.one_of(st.floats(max_value=1e5), st.just(math.nan), st.integers(-(2**70), 10**5))


@CI
@given(ranks=st.lists(NUMBERS, max_size=6), c=st.one_of(st.none(), st.lists(CANDIDATES, max_size=6)),
       w=st.one_of(st.none(), st.lists(NUMBERS, max_size=6)), index=st.integers(0, len(METRICS) - 1))
def test_metric_arguments(ranks, c, w, index):
    m = METRICS[index]
    try:
        v = m(np.array(ranks, dtype=object).astype(float) if ranks else ranks, c, w)
    except REFUSALS:
        return
    except OverflowError:  # numpy refusing a Python int beyond float range while building the array above
        return
    assert math.isfinite(v), (m.key, ranks, c, w, v)


@CI
@given(c=st.lists(st.integers(1, 60), min_size=1, max_size=8), scale=st.sampled_from([1.0, 1e-300, 1e300]),
       weighted=st.booleans())
def test_null_moments_are_finite(c, scale, weighted):
    w = np.linspace(1.0, 2.0, len(c)) * scale if weighted else None
    for m in METRICS:
        try:
            e = m.expected_value(c, w)
        except NoClosedFormError:
            continue
        assert math.isfinite(e), (m.key, c, w)


@CI
@given(content=st.one_of(st.binary(max_size=60), st.text(max_size=60).map(str.encode),
                         st.sampled_from([b'{"metrics": {"both.realistic.mrr": 1}}', b'{"metrics": []}',
                                          b'{"metrics": {}, "null_moments": []}', b"null", b'{"metrics": {"x": NaN}}'])))
def test_load_json_bytes(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("fuzz") / "r.json"
    path.write_bytes(content)
    try:
        res = Results.load_json(path)
    except InvalidInputError:
        return
    assert all(isinstance(v, float) for v in res.to_flat_dict().values() if not isinstance(v, (int, float)))


@st.composite
def tables(draw):
    n = draw(st.integers(1, 8))
    c = np.array(draw(st.lists(st.integers(1, 50), min_size=n, max_size=n)))
    o = np.array([draw(st.integers(1, int(ci))) for ci in c])
    p = np.array([draw(st.integers(int(oi), int(ci))) for oi, ci in zip(o, c)])
    w = None
    if draw(st.booleans()):
        w = np.array(draw(st.lists(st.sampled_from([0.0, 1e-300, 0.5, 3.0, 1e300]), min_size=n, max_size=n)))
        if not w.any():
            w[0] = 1.0
    side = np.array(draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n)))
    with_c = draw(st.booleans())
    from kgeval.ranks import RankTable

    return RankTable.from_ranks(o, p, num_candidates=c if with_c else None, side=side, weights=w)


@CI
@given(table=tables())
def test_results_values_are_finite_and_round_trip(tmp_path_factory, table):
    res = Results(table)
    flat = res.to_flat_dict()
    assert all(math.isfinite(v) for v in flat.values()), {k: v for k, v in flat.items() if not math.isfinite(v)}
    back = Results.load_json(res.save_json(tmp_path_factory.mktemp("rt") / "r.json"))
    assert back.to_flat_dict() == flat and back.null_model == res.null_model
