"""RankTable construction: every path validates (the dataclass constructor included), integer
columns are never truncated, the stored columns cannot change behind the validation."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval._validation import Side
from kgeval.errors import InvalidInputError
from kgeval.ranks import SIDE_HEAD, SIDE_NAMES, SIDE_NONE, SIDE_TAIL, RankTable, side_code


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"relation": [0.5, 1.7]}, r"relation must hold whole numbers, got 0.5 at position 0"),
        ({"triple_index": [0, 2.25]}, r"triple_index must hold whole numbers, got 2.25 at position 1"),
        ({"relation": [0, -2]}, r"relation must be >= -1"),
        ({"num_candidates": [10, 10.5]}, r"num_candidates must hold whole numbers"),
        ({"side": [0, 3]}, r"side codes must be 0 \(head\), 1 \(tail\), 2 \(relation\) or -1.*got 3 at position 1"),
        ({"side": [0.0, 0.5]}, r"side must hold whole numbers"),
        ({"side": ["head", "middle"]}, r"unknown side 'middle'.*position 1"),
        ({"side": [True, False]}, r"side must hold 'head'/'tail' names or 0/1/-1 codes, got True at position 0"),
        ({"weights": [1.0, np.inf]}, r"NaN or infinite"),
        ({"relation": [True, False]}, r"relation must hold numbers"),
        ({"relation": [0, True]}, r"relation must hold numbers, got True at position 1"),
        ({"num_candidates": [5, True]}, r"num_candidates must hold numbers, got True at position 1"),
        ({"side": [0, True]}, r"side must hold 'head'/'tail' names or 0/1/-1 codes, got True at position 1"),
        ({"weights": [1.0, False]}, r"weights must hold numbers, got False at position 1"),
    ],
)
def test_from_ranks_refuses_what_it_would_truncate(kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        RankTable.from_ranks([1, 2], [1, 3], **kwargs)


def test_a_boolean_in_a_list_of_ranks_is_refused():  # found by the fuzz test: [1, True] was read as [1, 1]
    with pytest.raises(InvalidInputError, match="optimistic ranks must hold numbers, got True at position 1"):
        RankTable.from_ranks([1, True])
    with pytest.raises(InvalidInputError, match="num_better must hold numbers"):
        RankTable.from_counts([0, True], [0, 0])


def test_integer_floats_are_kept_exactly():
    t = RankTable.from_ranks([1.0, 2.0], relation=[3.0, 4.0], triple_index=np.array([7, 8], dtype=np.uint8))
    np.testing.assert_array_equal(t.relation, [3, 4])
    np.testing.assert_array_equal(t.triple_index, [7, 8])
    assert t.relation.dtype == np.int64 and t.triple_index.dtype == np.int64


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"side": np.array([0], np.int8), "optimistic": np.array([3]), "pessimistic": np.array([1])},
         "pessimistic rank below optimistic"),
        ({"optimistic": [1, 2], "pessimistic": [1]}, "length mismatch"),
        ({"side": [0, 0], "optimistic": [1, 2], "pessimistic": [1, 2], "relation": [0]}, "length mismatch"),
        ({"side": [7], "optimistic": [1], "pessimistic": [1]}, "side codes"),
        ({"optimistic": [1], "num_candidates": [0]}, ">= 1"),
        ({"optimistic": [4], "num_candidates": [3]}, "rank above its number of candidates"),
        ({"optimistic": [0.5]}, "whole numbers"),
        ({"optimistic": [1], "weight": [-1.0]}, "non-negative"),
        ({"side": [0]}, "no ranks given"),
    ],
)
def test_direct_constructor_validates(kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        RankTable(**kwargs)


def test_direct_constructor_normalises_like_from_ranks():
    direct = RankTable(side=["head", "tail"], optimistic=[1, 2], num_candidates=5)
    built = RankTable.from_ranks([1, 2], [1, 2], side=["head", "tail"], num_candidates=[5, 5])
    for col in ("side", "optimistic", "pessimistic", "num_candidates"):
        np.testing.assert_array_equal(getattr(direct, col), getattr(built, col))
        assert getattr(direct, col).dtype == getattr(built, col).dtype


def test_columns_are_read_only_copies():
    opt = np.array([1, 2, 3])
    w = np.array([1.0, 2.0, 3.0])
    t = RankTable.from_ranks(opt, num_candidates=[5, 5, 5], weights=w)
    opt[0], w[0] = 4, 9.0  # the caller's arrays change; the table does not
    assert t.optimistic[0] == 1 and t.weight[0] == 1.0
    for col in ("side", "optimistic", "pessimistic", "num_candidates", "weight"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(t, col)[0] = 0


def test_weights_stored_as_given():
    t = RankTable.from_ranks([1, 2], weights=[1e308, 1e308])
    np.testing.assert_array_equal(t.weight, [1e308, 1e308])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: RankTable.from_counts([0.5], [0]), "num_better must hold whole numbers"),
        (lambda: RankTable.from_counts([0], [-1]), "num_tied must be >= 0"),
        (lambda: RankTable.from_counts([0, 1], [0]), "length mismatch"),
        (lambda: RankTable.from_counts([2**62], [0]), "too large"),
        (lambda: RankTable.from_scores([[0.1, 0.2]], [0.7]), "true_index must hold whole numbers"),
        (lambda: RankTable.from_scores([[0.1, 0.2]], [2]), r"true_index 2 at position 0 is out of range \[0, 2\)"),
        (lambda: RankTable.from_scores([["a", "b"]], [0]), "scores must be real numbers"),
        (lambda: RankTable.from_scores([[0.1, 0.2]], [0], candidate_mask=[[1.0, 0.5]]), "candidate_mask must hold booleans"),
        (lambda: RankTable.from_scores([[0.1, 0.2]], [0], candidate_mask=[["True", "False"]]), "candidate_mask must hold booleans"),
        (lambda: RankTable.from_scores([[0.1, np.nan]], [0]), "NaN"),
    ],
)
def test_other_constructors_refuse_silent_conversions(call, match):
    with pytest.raises(InvalidInputError, match=match):
        call()


def test_from_scores_integer_mask_and_callers_mask_untouched():
    scores = np.array([[0.3, 0.9, 0.3, 0.1]])
    mask = np.array([[1, 0, 1, 1]])
    t = RankTable.from_scores(scores, [0], candidate_mask=mask)
    # the better candidate (0.9) is masked out; 0.3 ties once; 4 - 1 masked = 3 candidates
    assert (t.optimistic[0], t.pessimistic[0], t.num_candidates[0]) == (1, 2, 3)
    np.testing.assert_array_equal(mask, [[1, 0, 1, 1]])


def test_subset_validates_the_selection():
    t = RankTable.from_ranks([1, 2, 3], side=["head", "tail", "tail"])
    np.testing.assert_array_equal(t.subset([2, 0]).optimistic, [3, 1])
    np.testing.assert_array_equal(t.subset(t.side == SIDE_TAIL).optimistic, [2, 3])
    with pytest.raises(InvalidInputError, match="whole numbers"):
        t.subset([0.5])
    with pytest.raises(InvalidInputError, match="out of range"):
        t.subset([3])
    with pytest.raises(InvalidInputError, match="boolean mask needs shape"):
        t.subset([True, False])
    with pytest.raises(InvalidInputError, match="no ranking task"):
        t.subset(np.zeros(3, bool))


def test_side_names_are_the_side_enum():
    assert (SIDE_HEAD, SIDE_TAIL, SIDE_NONE) == (Side.HEAD, Side.TAIL, Side.NONE)
    assert [SIDE_NAMES[s] for s in (0, 1, -1)] == ["head", "tail", "both"]
    assert [side_code(x) for x in ("head", "left", "tail", "right", "both", 1)] == [0, 0, 1, 1, -1, 1]
    t = RankTable.from_ranks([1, 2], side="both")
    assert t.sides == [] and t.select_side("both") is t
    with pytest.raises(InvalidInputError, match="unknown side"):
        t.select_side("middle")


def test_realistic_ranks_do_not_overflow():  # optimistic + pessimistic in int64 wrapped to a negative rank
    t = RankTable.from_ranks([2**62], [2**62])
    assert t.ranks("realistic")[0] == 2.0**62
