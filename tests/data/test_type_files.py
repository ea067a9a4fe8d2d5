"""Type-constraint files (OpenKE's type_constrain.txt and the relation/side/entity TSV), entity-type files and the
inference from training triples: parsed against the sets written, and every malformed line a named error."""

from __future__ import annotations

import numpy as np
import pytest

from kgeval.data.type_files import parse_entity_types, parse_type_constraints, read_type_constraints
from kgeval.data.types import CandidateSets, EntityTypes
from kgeval.errors import InvalidInputError

E, R = 20, 4


def _random_sets(seed):
    rng = np.random.default_rng(seed)
    return {side: {r: sorted(set(rng.choice(E, size=rng.integers(0, 8)).tolist())) for r in range(R)}
            for side in ("head", "tail")}


def _openke_text(sets) -> str:
    """OpenKE's n-n.py layout: the relation count, then per relation a head line and a tail line."""
    lines = [str(R)]
    for r in range(R):
        for side in ("head", "tail"):
            ents = list(reversed(sets[side][r]))  # unsorted, as OpenKE writes dict order
            lines.append("\t".join(map(str, [r, len(ents), *ents])))
    return "\n".join(lines) + "\n"


def _check(cs: CandidateSets, sets):
    for side in ("head", "tail"):
        for r in range(R):
            got = cs.allowed(r, side)
            assert got is not None and got.tolist() == sets[side][r], (side, r)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_openke_layout(seed, tmp_path):
    sets = _random_sets(seed)
    path = tmp_path / "type_constrain.txt"
    path.write_text(_openke_text(sets))
    cs = read_type_constraints(path, num_entities=E, num_relations=R)
    _check(cs, sets)
    assert cs.source == "file type_constrain.txt (OpenKE layout)" and cs.num_constrained() == 2 * R
    # membership agrees with the sets, pair by pair
    rel, ent = np.meshgrid(np.arange(R), np.arange(E), indexing="ij")
    for side in ("head", "tail"):
        got = cs.contains(rel.ravel(), ent.ravel(), side)
        assert got.tolist() == [int(e) in sets[side][int(r)] for r, e in zip(rel.ravel(), ent.ravel())]


def test_tsv_layout_with_labels_and_ids():
    sets = _random_sets(3)
    lines = ["relation\tside\tentity"]  # a header is skipped
    for side in ("head", "tail"):
        for r in range(R):
            lines += [f"rel{r}\t{side.upper() if r % 2 else side}\te{e}" for e in sets[side][r]]
    ent_map = {f"e{i}": i for i in range(E)}
    rel_map = {f"rel{i}": i for i in range(R)}
    cs = parse_type_constraints("\n".join(lines).encode(), source="types.tsv", num_entities=E, num_relations=R,
                                entity_to_id=ent_map, relation_to_id=rel_map)
    # relations without any line on a side stay unconstrained there
    for side in ("head", "tail"):
        for r in range(R):
            want = sets[side][r] or None
            got = cs.allowed(r, side)
            assert (got if got is None else got.tolist()) == want
    ids = "\n".join(f"{r}\t{'domain' if s == 'head' else 'range'}\t{e}" for s in ("head", "tail") for r in range(R)
                    for e in sets[s][r])
    assert parse_type_constraints(ids.encode(), source="x", num_entities=E, num_relations=R) == cs


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty"),
    ("x\n", "number of relations"),
    ("2\n0 1 3\n0 0\n", "says 2 relations, so 4 lines should follow"),
    ("1\n0 2 3\n0 0\n", r"line 2: relation 0 says 2 entities but the line lists 1"),
    ("1\n0 1 3\n1 0\n", "line 3: the tail line of relation 1 follows the head line of relation 0"),
    ("1\n9 1 3\n9 0\n", r"line 2: relation id 9 is out of range \[0, 4\)"),
    ("1\n0 1 99\n0 0\n", r"line 2: entity id 99 is out of range \[0, 20\)"),
    ("1\n0 1 -3\n0 0\n", "line 2: entity id must be a non-negative integer"),
    ("2\n0 1 3\n0 0\n0 1 4\n0 0\n", "line 4: relation 0 has a second head line"),
    ("0\thead\t1\n0\tup\t2\n", "line 2: side must be 'head' or 'tail'"),
    ("0\thead\n", "line 1: expected 3 non-empty tab-separated fields"),
    ("0\thead\t1.5\n", "line 1: entity id must be a non-negative integer, got '1.5'"),
    ("# only a comment\n", "no \\(relation, side, entity\\) line"),
])
def test_malformed_files_name_file_and_line(text, message):
    with pytest.raises(InvalidInputError, match=message) as info:
        parse_type_constraints(text.encode(), source="bad.txt", num_entities=E, num_relations=R)
    assert "bad.txt" in str(info.value)


def test_unknown_label_is_named_with_a_suggestion():
    with pytest.raises(InvalidInputError, match=r"t.tsv, line 1: unknown entity 'alise'.*alice"):
        parse_type_constraints(b"likes\thead\talise\n", source="t.tsv", num_entities=2, num_relations=1,
                               entity_to_id={"alice": 0, "bob": 1}, relation_to_id={"likes": 0})


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "types.bin"
    path.write_bytes(b"\x00\x01\xff\xfe")
    with pytest.raises(InvalidInputError, match="types.bin"):
        read_type_constraints(path, num_entities=E, num_relations=R)


def test_inferred_from_triples_and_widened_by_types():
    rng = np.random.default_rng(4)
    train = rng.integers(0, [E, R - 1, E], size=(50, 3))  # relation R - 1 never seen: unconstrained
    types = rng.integers(0, 5, size=E)
    untyped = 7
    pairs = [(e, int(t)) for e, t in enumerate(types) if e != untyped]
    et = EntityTypes(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]), num_entities=E)
    plain = CandidateSets.from_triples(train, num_entities=E, num_relations=R)
    wide = CandidateSets.from_triples(train, num_entities=E, num_relations=R, entity_types=et)
    for r in range(R):
        for side, col in (("head", 0), ("tail", 2)):
            seen = set(train[train[:, 1] == r, col].tolist())
            if r == R - 1:
                assert plain.allowed(r, side) is None and wide.allowed(r, side) is None
                continue
            assert plain.allowed(r, side).tolist() == sorted(seen)
            kinds = {int(types[e]) for e in seen if e != untyped}
            expected = seen | {e for e in range(E) if e != untyped and int(types[e]) in kinds}
            assert wide.allowed(r, side).tolist() == sorted(expected)
    assert wide.source == f"inferred from train (50 triples), widened by {et.num_types} entity types"


def test_entity_type_file():
    et = parse_entity_types(b"a\tperson\nb\tperson\nb\tcity\n\n# comment\nc\tcity\n", source="types.tsv",
                            num_entities=3, entity_to_id={"a": 0, "b": 1, "c": 2})
    assert et.types_of([1]).tolist() == [0, 1] and et.members([1]).tolist() == [1, 2]
    assert et.type_names == ["person", "city"]
    with pytest.raises(InvalidInputError, match="types.tsv, line 1: expected 2 non-empty"):
        parse_entity_types(b"a\n", source="types.tsv", num_entities=3, entity_to_id={"a": 0})
    with pytest.raises(InvalidInputError, match=r"entity id 5 is out of range \[0, 3\)"):
        parse_entity_types(b"5\tx\n", source="types.tsv", num_entities=3)


def test_candidate_sets_bad_input():
    with pytest.raises(InvalidInputError, match=r"entity id 20 is out of range"):
        CandidateSets.from_sets({0: [20]}, {}, num_entities=E, num_relations=R)
    with pytest.raises(InvalidInputError, match="relation id -1 is out of range"):
        CandidateSets.from_sets({-1: [2]}, {}, num_entities=E, num_relations=R)
    with pytest.raises(InvalidInputError, match="must be a mapping"):
        CandidateSets.from_sets([1, 2], {}, num_entities=E, num_relations=R)
    with pytest.raises(InvalidInputError, match="head and a tail side"):
        CandidateSets(E, R, {"both": ([0], [1])})
