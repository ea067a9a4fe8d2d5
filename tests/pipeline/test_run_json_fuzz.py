"""Fuzz tests of every JSON file a run reader parses (issue 31, class 2): hostile shapes (deep nesting,
huge numbers and sizes, a wrong type at any level, bytes that are not UTF-8, NaN / Infinity literals,
duplicate keys, truncation) end in a kgeval error naming the problem, never another exception, and a run
that still loads shows its rank table's numbers (oracle: numpy on rank_table.npz)."""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from run_oracle import oracle_mrr
from kgeval._json import parse_json
from kgeval.errors import KGEvalError
from kgeval.workflow.runs import load_run, write_manifest

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MRR = "both.realistic.inverse_harmonic_mean_rank"

scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=12))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                      max_leaves=8)
RAW = [b"", b"[" * 100_000, b"{\"a\":" * 5000, b"\xff\xfe\x00", b"\xef\xbb\xbf{}", b"NaN", b"-Infinity",
       b"1e999", b"9" * 5000, b"{\"files\": 1, \"files\": {}}", b"{\"metrics\": {}, \"metrics\": {}}", b"\x00" * 64,
       b"[1, 2", b"\"unterminated"]


@st.composite
def hostile_documents(draw, original):
    """The bytes of ``original`` (a parsed document) with one node anywhere replaced by a hostile value,
    serialised with NaN / Infinity literals where the value holds them; or one of :data:`RAW`; or a
    truncation of the document."""
    kind = draw(st.sampled_from(["replace", "raw", "truncate"]))
    text = json.dumps(original)
    if kind == "raw":
        return draw(st.sampled_from(RAW))
    if kind == "truncate":
        return text.encode()[: draw(st.integers(0, len(text) - 1))]
    doc = json.loads(text)
    node, key = None, None
    cursor = doc
    while isinstance(cursor, (dict, list)) and cursor and draw(st.booleans()):
        keys = list(cursor) if isinstance(cursor, dict) else list(range(len(cursor)))
        node, key = cursor, draw(st.sampled_from(keys))
        cursor = cursor[key]
    replacement = draw(values)
    if node is None:
        doc = replacement
    else:
        node[key] = replacement
    return json.dumps(doc, allow_nan=True).encode()


def fresh_copy(saved: Path, root: str) -> Path:
    return Path(shutil.copytree(saved, Path(root) / "run"))


def load_and_check(run: Path, oracle: float) -> None:
    """Load the run as report/compare/evaluate do: a kgeval error, or the rank table's MRR."""
    from kgeval.workflow.runs import load_run_results

    try:
        _, results = load_run_results(run)
    except KGEvalError:
        return
    assert results.value("both", "realistic", "inverse_harmonic_mean_rank") == pytest.approx(oracle, rel=1e-12)
    results.evaluation_protocol.describe()  # what report and evaluate print


@pytest.mark.parametrize("name", ["config.json", "results.json", "manifest.json"])
def test_hostile_run_json(saved, name):
    original = json.loads((saved / name).read_text())
    oracle = oracle_mrr(saved)

    @FUZZ
    @given(hostile_documents(original))
    def check(data):
        with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            run = fresh_copy(saved, root)
            (run / name).write_bytes(data)
            if name != "manifest.json":
                write_manifest(run)  # as an attacker would: the parser is reached
            load_and_check(run, oracle)

    check()


def test_hostile_replicate_summary(saved):
    from kgeval.workflow.replicates import REPLICATES_FILE, load_replicates

    @FUZZ
    @given(hostile_documents({"runs": ["seed1"], "seeds": [1], "summary": {"mrr": {"mean": 0.5}}}))
    def check(data):
        with tempfile.TemporaryDirectory() as root:
            (Path(root) / "seed1").mkdir()
            (Path(root) / REPLICATES_FILE).write_bytes(data)
            try:
                runs = load_replicates(root)
            except KGEvalError:
                return
            assert all(Path(root).resolve() in p.resolve().parents for p in runs)

    check()


@FUZZ
@given(st.binary(max_size=200) | values.map(lambda v: json.dumps(v, allow_nan=True).encode()))
def test_parse_json_raises_only_named_errors(data):
    try:
        obj = parse_json(data, "fuzz", allow_nan=False)
    except KGEvalError as exc:
        assert str(exc).startswith("fuzz: not a JSON file")
        return
    assert json.loads(json.dumps(obj, allow_nan=False)) == obj  # strict: finite numbers only


def test_strict_json_refuses_every_non_finite_literal():
    for text in ("NaN", "[Infinity]", "{\"a\": -Infinity}", "1e400", "[-1e999]"):
        with pytest.raises(KGEvalError, match="not a JSON file"):
            parse_json(text, "x", allow_nan=False)
    assert parse_json("[1e308, -0.0, 5]", "x", allow_nan=False) == [1e308, -0.0, 5]


def test_wrong_protocol_types_in_results_json_are_named(saved):
    """A wrong type at each field of results.json's protocol: 'sides': 1 or 'sampling': {} were TypeErrors
    in whatever read the protocol next (report, evaluate, compare)."""
    from kgeval.results import Results

    original = json.loads((saved / "results.json").read_text())
    original["metrics"] = {MRR: original["metrics"][MRR]}  # the protocol is under test: one value is enough
    for field in original["protocol"]:
        for wrong in (None, 1, "x", [], {}, 1e308, True, [1, [2]], {"a": {}}):
            data = json.loads(json.dumps(original))
            data["protocol"][field] = wrong
            try:
                results = Results.from_json(data, source="fuzz")
            except KGEvalError as exc:
                assert "fuzz: not a kgeval results file" in str(exc)
                continue
            results.evaluation_protocol.describe()


def test_load_run_itself_never_raises_another_exception_for_config_types(saved):
    """A wrong type at each top-level field of config.json's configuration section."""
    config = json.loads((saved / "config.json").read_text())
    for field in config["configuration"]:
        for wrong in (None, 1, "x", [], {}, 1e308, True):
            with tempfile.TemporaryDirectory() as root:
                run = fresh_copy(saved, root)
                changed = json.loads(json.dumps(config))
                changed["configuration"][field] = wrong
                (run / "config.json").write_text(json.dumps(changed))
                write_manifest(run)
                try:
                    load_run(run)
                except KGEvalError:
                    pass


@pytest.mark.parametrize("dataset", [[], 1, {"hashes": ["training"]}, {"hashes": "training"}])
def test_config_dataset_identity_of_the_wrong_shape_is_named(saved, tmp_path, dataset):
    """check_dataset (evaluate) indexed the hashes: a list was a TypeError traceback."""
    from click.testing import CliRunner

    from kgeval.cli import main

    run = fresh_copy(saved, str(tmp_path))
    config = json.loads((run / "config.json").read_text())
    config["dataset"] = dataset
    (run / "config.json").write_text(json.dumps(config))
    write_manifest(run)
    res = CliRunner().invoke(main, ["evaluate", "--model-file", str(run)])
    assert res.exit_code == 2 and "not a kgeval pipeline configuration ('dataset'" in res.output, res.output
