"""Evaluation whitelists of labels and ids (:func:`kgeval.workflow.evaluation.resolve_whitelist`)."""

from __future__ import annotations

import pytest

from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.workflow.evaluation import resolve_whitelist

WORDS = {"alice": 0, "bob": 1, "carol": 2}
OFFSETS = {"00001740": 0, "00311113": 1, "02084071": 2}  # WN18RR-like synset offsets


def test_labels_and_ids_of_word_labels():
    assert resolve_whitelist(["carol", "1", 0], WORDS, 3, "entity") == [0, 1, 2]
    with pytest.raises(UnknownNameError):
        resolve_whitelist(["dave"], WORDS, 3, "entity")
    with pytest.raises(InvalidInputError, match="outside"):
        resolve_whitelist(["7"], WORDS, 3, "entity")


def test_digit_string_is_not_an_id_where_labels_are_digits():
    """'1740' is not a label of a dataset whose labels are digit strings: reading it as id 1 (here; 1740
    on WN18RR) restricted the evaluation to another entity without a word."""
    assert resolve_whitelist(["00311113"], OFFSETS, 3, "entity") == [1]
    with pytest.raises(InvalidInputError, match="'00001740'"):
        resolve_whitelist(["1740"], OFFSETS, 3, "entity")
    with pytest.raises(InvalidInputError, match="digit strings"):
        resolve_whitelist(["1"], OFFSETS, 3, "entity")
    assert resolve_whitelist([1], OFFSETS, 3, "entity") == [1]  # an integer is an id
