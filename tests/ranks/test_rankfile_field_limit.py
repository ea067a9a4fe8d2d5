"""A huge field in a rank file is refused by line and column before numpy sizes a string array by it
(issue 31, 7c: a 300 MB field was parsed through a 1.1 GiB numpy string array, a MemoryError), and no
error message quotes a whole huge line."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval import InvalidInputError
from kgeval.rankfile import MAX_FIELD_CHARS, parse_rank_bytes

BIG = 5_000_000  # large enough that a quoted line would make a 5 MB message


@pytest.mark.parametrize("data, where", [
    (b"optimistic,pessimistic\n1,2\n" + b"1" * BIG + b",3\n", r"line 3, column 1 \('optimistic'\)"),
    (b"optimistic\tside\n1\thead\n2\t" + b"x" * BIG + b"\n", r"line 3, column 2 \('side'\)"),
    (b"rank weight\n1 1\n2 " + b"9" * BIG + b"\n", r"line 3, column 2 \('weight'\)"),
    (b"rank\tside\n" + b"y" * BIG + b"\tboth\n", r"line 2, column 1 \('rank'\)"),
    (b"rank " + b"z" * 2000 + b"\n1 2\n", r"line 1, column 2 of the header"),
])
def test_a_huge_field_is_named_by_line_and_column(data, where):
    with pytest.raises(InvalidInputError, match=f"f.csv, {where}: a field of \\d+ characters") as info:
        parse_rank_bytes(data, "f.csv")
    assert len(str(info.value)) < 400


@pytest.mark.parametrize("data", [
    b'rank,side\n1,"' + b"x" * BIG + b'"\n',  # the csv module's own field limit
    b"rank,side\n1,head," + b"z" * BIG + b"\n",  # too many fields
    b"rank,side\n1," + b"q" * 500 + b"\n",  # an unknown side under the field limit
])
def test_error_messages_quote_a_bounded_part_of_a_long_line(data):
    with pytest.raises(InvalidInputError, match="line 2") as info:
        parse_rank_bytes(data, "f.csv")
    assert len(str(info.value)) < 1200


def test_fields_up_to_the_limit_still_parse_exactly():
    """Zero-padded integers and long decimals at the limit read as their value (the bound refuses
    nothing a writer of numbers produces)."""
    width = MAX_FIELD_CHARS
    rank = "0" * (width - 1) + "7"
    weight = "0." + "0" * (width - 4) + "25"
    table = parse_rank_bytes(f"rank,weight,side\n{rank},{weight},tail\n3,1,head\n".encode(), "f.csv")
    assert table.optimistic.tolist() == [7, 3]
    assert table.weight.tolist() == [float(weight), 1.0] and table.side.tolist() == [1, 0]
    with pytest.raises(InvalidInputError, match=f"a field of {width + 1} characters"):
        parse_rank_bytes(f"rank\n0{rank}\n".encode(), "f.csv")


def test_one_wide_field_does_not_widen_the_whole_column():
    """numpy's string array is as wide as the longest field for every row: one 1000-character field in
    20,000 rows made an 80 MB array per column (4 GB at a million rows); wide columns now parse per field.
    Measured with tracemalloc (numpy reports its allocations to it)."""
    import tracemalloc

    n = 20_000
    wide = "0" * (MAX_FIELD_CHARS - 1) + "7"
    text = "optimistic\tpessimistic\tside\n" + "".join(f"{i % 5 + 1}\t{i % 5 + 2}\thead\n" for i in range(n))
    data = (text + f"{wide}\t{wide}\t{'tail'}\n").encode()
    tracemalloc.start()
    try:
        table = parse_rank_bytes(data, "w.tsv")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert table.optimistic[-1] == 7 and table.pessimistic[-1] == 7 and table.side[-1] == 1
    assert np.array_equal(table.optimistic[:n], np.arange(n) % 5 + 1) and (table.side[:n] == 0).all()
    assert peak < 40e6, peak  # the old fixed-width path alone needed 2 x 80 MB
