"""Two gloo ranks on CPU (subprocesses, one process group for every scenario) against one process."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from patience import env as patient_env
from patience import scaled

from kgeval.errors import InvalidInputError
from kgeval.evaluation import EvaluationOptions

WORKER = Path(__file__).with_name("dist_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    procs, logs = _spawn_two(lambda r, port: [str(WORKER), str(r), "2", str(port), str(out)], timeout=scaled(300))
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _spawn_two(args, timeout: float):
    """Run ``python *args(rank, port)`` for ranks 0 and 1 on a free port (this checkout's src first on the
    path, one OpenMP thread each): ``(processes, their combined output)``; a hang kills both and fails."""
    port = _free_port()
    env = patient_env({**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                                     os.environ.get("PYTHONPATH", "")]),
                       "OMP_NUM_THREADS": "1"})
    procs = [subprocess.Popen([sys.executable, *args(r, port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(2)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=timeout)[0].decode(errors="replace"))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("distributed workers hung")
    return procs, logs


SCENARIOS = ["filtered", "unfiltered", "restricted", "sampled", "macro_small_batches", "typed"]
ENTITY_SCENARIOS = SCENARIOS + ["sampled_unfiltered_restricted", "chunked", "head_only_worst", "restricted_empty_slice",
                                 "restricted_empty_slice_chunked", "restricted_empty_slice_sampled",
                                 "typed_chunked_restricted"]
FLOAT_MODELS = ["tucker", "rotate", "pairre", "transe_float"]
FLOAT_SCENARIOS = ["filtered", "sampled"]
CORE_SCENARIOS = ["filtered", "unfiltered", "restricted", "sampled"]


@pytest.mark.parametrize("mode", ["tasks"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rank_tables_equal_single_process(reports, mode, scenario):
    for rank, rep in enumerate(reports):
        r = rep[f"{mode}/{scenario}"]
        assert len(r["single"]["optimistic"]) > 0
        assert r["distributed"] == r["single"], f"rank {rank}"
        assert r["protocol_diff"] == [], f"rank {rank}"


@pytest.mark.parametrize("name", ["relation"])
def test_relation_prediction_splits_over_ranks(reports, name):
    for rank, rep in enumerate(reports):
        r = rep[f"targets/{name}"]
        assert len(r["single"]["optimistic"]) > 0
        assert r["distributed"] == r["single"], f"rank {rank}"


def test_a_rank_with_no_tasks_plans_nothing_and_agrees(reports):
    """Fewer evaluation triples than ranks ("tasks"): the rank with an empty share must rank nothing
    and not fail (it raised an IndexError grouping no task by query, and its batch planning divided
    by zero tasks where rows are planned in tall chunks), full rows and sampled negatives alike."""
    for rank, rep in enumerate(reports):
        for name in ("one_triple", "one_triple_sampled"):
            r = rep[f"tasks/{name}"]
            assert len(r["single"]["optimistic"]) == 2  # one triple, both sides
            assert r["distributed"] == r["single"], (name, f"rank {rank}")


@pytest.mark.parametrize("mode", ["tasks"])
def test_mismatched_inputs_fail_on_every_rank(reports, mode):
    for rep in reports:
        r = rep[f"{mode}/mismatch"]
        assert r["error"] == "DistributedMismatchError"
        assert "rank(s) [1]" in r["message"]


def test_ranks_holding_different_models_fail_on_every_rank(reports):
    """distributed="tasks": each rank ranks its share of the tasks with its own model. A rank holding
    another one (here rank 1: other entity rows, or one other relation row) ranked its half with it,
    silently: the tables differed from one process's (realistic MR 13.1 vs 14.32, MRR 0.180 vs 0.162 on this graph) without a word.
    Now DistributedMismatchError on every rank; scores that only round differently still agree."""
    for rep in reports:
        for name in ("other_model", "other_relation"):
            r = rep[f"tasks/{name}"]
            assert r["error"] == "DistributedMismatchError", (name, r)
            assert "rank 1 of 2" in r["message"] and "same model" in r["message"]
        r = rep["tasks/rounding"]
        assert len(r["single"]["optimistic"]) > 0 and r["distributed"] == r["single"]


@pytest.mark.multiprocess  # (the tests using the ranks of the `reports` fixture are marked in conftest.py)
def test_a_rank_not_taking_part_is_a_named_error(tmp_path):
    """Rank 1 evaluates in one process, rank 0 with distributed="tasks": rank 0's first collective
    times out (2 s here). It raised gloo's bare RuntimeError ('Timed out waiting 2000ms for send
    operation to complete'); now CollectiveError, naming the rank and what to check."""
    worker = Path(__file__).with_name("timeout_worker.py")
    _, logs = _spawn_two(lambda r, port: [str(worker), str(r), str(port), str(tmp_path)], timeout=scaled(120))
    reps = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert reps[1]["error"] is None, logs
    assert reps[0]["error"] == "CollectiveError", (reps[0], logs)
    assert "rank 0 of 2" in reps[0]["message"] and "distributed=" in reps[0]["message"]


@pytest.mark.parametrize("mode", ["tasks"])
def test_exception_on_one_rank_ends_every_rank(reports, mode):
    assert reports[1][f"{mode}/exception"]["error"] == "Boom"
    r0 = reports[0][f"{mode}/exception"]
    assert r0["error"] == "RankFailedError"
    assert "rank 1" in r0["message"] and "Boom" in r0["message"]


@pytest.mark.parametrize("mode", ["tasks", "entities"])
def test_without_process_group_is_a_named_error(mode):
    import numpy as np
    import torch

    import kgeval
    from kgeval.models import DistMultScorer

    scorer = DistMultScorer(torch.ones(5, 2), torch.ones(2, 2))
    with pytest.raises(InvalidInputError, match="process group"):
        kgeval.evaluate(scorer, np.array([[0, 0, 1]]), progress=False, distributed=mode)


def test_unknown_mode_is_a_named_error():
    with pytest.raises(InvalidInputError, match="distributed must be one of"):
        EvaluationOptions(distributed="rows")


# ---------------------------------------------------------------- distributed="entities"
@pytest.mark.parametrize("model", ["distmult", "distmult_nan"])
@pytest.mark.parametrize("scenario", ENTITY_SCENARIOS)
def test_entity_shards_equal_single_process(reports, model, scenario):
    """Each rank holds half of the entities; the full rank table (every rank type, both sides) and
    the protocol equal one process holding the whole model."""
    for rank, rep in enumerate(reports):
        r = rep[f"entities/{model}/{scenario}"]
        assert len(r["single"]["optimistic"]) > 0
        assert r["distributed"] == r["single"], f"rank {rank}"
        assert r["protocol_diff"] == [], f"rank {rank}"


@pytest.mark.parametrize("model", ["complex", "transe", "transe_l1", "embeddings"])
@pytest.mark.parametrize("scenario", CORE_SCENARIOS)
def test_entity_shards_of_other_models_equal_single_process(reports, model, scenario):
    test_entity_shards_equal_single_process(reports, model, scenario)


@pytest.mark.parametrize("model", FLOAT_MODELS)
@pytest.mark.parametrize("scenario", FLOAT_SCENARIOS)
def test_entity_shards_of_float_models_equal_single_process(reports, model, scenario):
    test_entity_shards_equal_single_process(reports, model, scenario)


@pytest.mark.parametrize("scenario", ["filtered", "chunked"])
def test_entity_shards_summed_by_all_reduce_equal_single_process(reports, scenario):
    """gloo with 2 ranks sums by all-gather and a local sum; NCCL and larger groups by all_reduce:
    that path (forced here) gives the same tables."""
    test_entity_shards_equal_single_process(reports, "all_reduce", scenario)


def test_sums_over_ranks_keep_the_dtype_either_way(reports):
    """Both ways of summing give the element-wise sum in the input's dtype (int32 rows of float bits
    must not come back as int64: their view as floats would have twice the width)."""
    world = len(reports)
    expected = (torch.arange(6).view(2, 3) * sum(r + 1 for r in range(world))).tolist()
    for rep in reports:
        sums = rep["entities/sums"]
        assert len(sums) == 4
        for key, (dtype, values) in sums.items():
            assert dtype == key.split("/")[1] and values == expected, key


def test_entity_shards_nan_raise_is_a_named_error_on_every_rank(reports):
    for rep in reports:
        r = rep["entities/nan_raise"]
        assert r["error"] == "NaNScoresError", r  # an InvalidInputError
        assert "NaN scores for triple" in r["message"] and "nan_policy='worst'" in r["message"]
    assert reports[0]["entities/nan_raise"] == reports[1]["entities/nan_raise"]


@pytest.mark.parametrize("case", ["entities/nan_one_rank/whole_rows", "entities/nan_one_rank/chunked",
                                  "entities/nan_one_rank/sampled", "entities/nan_one_rank/head_only",
                                  "entities/nan_one_rank/candidate_only", "entities/nan_one_rank/tiles",
                                  "entities/nan_one_rank/rerank",
                                  "tasks/nan_one_rank/tasks", "tasks/nan_one_rank/tasks_sampled"])
def test_a_nan_seen_by_one_rank_is_the_same_named_error_on_every_rank(reports, case):
    """nan_policy='raise' with a NaN score only one rank computes (a candidate in rank 1's entity slice;
    the true score of a task in rank 1's share): every rank ends (the workers' time limit catches a
    hang) with the same NaNScoresError and message, not rank 1's error and a RankFailedError elsewhere."""
    assert [rep["nan_one_rank/sees_nan"] for rep in reports] == [False, True]
    assert reports[0]["nan_one_rank/paths"] == ["rerank", "tiles"]  # those paths ran
    # promptly: a rank left waiting for a peer that already raised would end at the process group's timeout
    slowest = [rep["nan_one_rank/slowest_s"] for rep in reports]
    assert max(slowest) < reports[0]["group_timeout_s"] / 3, slowest
    if case.startswith("tasks/"):  # alone, only rank 1's share of the tasks holds the NaN
        assert [rep["nan_one_rank/own_share"]["error"] for rep in reports] == [None, "NaNScoresError"]
    got = [rep[case] for rep in reports]
    assert got[0]["error"] == "NaNScoresError", got
    assert got[0] == got[1]
    assert "NaN scores for triple" in got[0]["message"] and "nan_policy='worst'" in got[0]["message"]


def test_entity_shards_out_of_memory_on_one_rank_halves_every_rank(reports):
    for rep in reports:
        assert rep["entities/oom"]["distributed"] == rep["entities/oom"]["single"]


@pytest.mark.parametrize("case, message", [("mismatch_range", "rank 1 of 2 holds entities [0, 15) but must hold [15, 30)"),
                                           ("mismatch_entities", "rank(s) [1]"),
                                           ("mismatch_parameters", "rank 1's shard has other parameters")])
def test_entity_shards_that_disagree_fail_on_every_rank(reports, case, message):
    for rep in reports:
        r = rep[f"entities/{case}"]
        assert r["error"] == "DistributedMismatchError", r
        assert message in r["message"]


@pytest.mark.parametrize("kind", ["plain", "module"])
def test_user_shards_without_a_digest_compare_their_relation_tensors(reports, kind):
    """A user's own shard (no replicated_digest()) on rank 1 with another relation row: each rank scored its
    entities with its own relations and the rank table mixed them, silently (no check at all). Now the ranks
    compare the shard's float tensors that are not entity rows (attributes, or an nn.Module's state) and fail
    with DistributedMismatchError naming the tensor; the same relations (entity rows and an integer offset
    differing between ranks) evaluate as one process, without a warning."""
    for rank, rep in enumerate(reports):
        same = rep[f"user_shard/{kind}/same"]
        assert same["distributed"] == same["single"] and same["warnings"] == [], f"rank {rank}"
        r = rep[f"user_shard/{kind}/other_relation"]
        assert r["error"] == "DistributedMismatchError", r
        name = "relation" if kind == "plain" else "params.relation"
        assert f"rank 1's shard holds other values in {name!r} than rank 0's" in r["message"]
        assert "replicated_digest()" in r["message"]


def test_user_shards_with_nothing_to_compare_warn(reports):
    """A user's shard whose parameters the ranks cannot see (a closure) cannot be checked: rank 0 warns, once."""
    warned = reports[0]["user_shard/closure/warnings"]
    assert len(warned) == 1 and "ClosureShard" in warned[0] and "replicated_digest()" in warned[0], warned
    assert reports[1]["user_shard/closure/warnings"] == []


def test_replicated_tensors_skip_entity_rows_and_integers():
    """What a digest-less shard's ranks compare: float tensors without a dimension of the local entity count."""
    import numpy as np

    from kgeval.evaluation.distributed import replicated_tensors

    class Shard:
        pass

    s = Shard()
    s.entity, s.entity_t = torch.ones(15, 4), torch.ones(4, 15)  # entity rows, either way round
    s.relation, s.bias = torch.ones(4, 4), np.zeros(3, dtype=np.float32)
    s.offset, s.ids = torch.tensor(15), np.arange(3)  # integers: offsets, ids
    got = replicated_tensors(s, 15)
    assert sorted(got) == ["bias", "relation"] and got["relation"][:2] == ((4, 4), "torch.float32")
    s.relation = s.relation + 1
    assert replicated_tensors(s, 15)["relation"] != got["relation"]


def test_entity_shards_more_ranks_than_entities(reports):
    for rep in reports:
        r = rep["entities/too_many_ranks"]
        assert r["error"] == "TooManyRanksError", r
        assert "world size 2 is larger than the number of entities 1" in r["message"]


def test_entities_mode_needs_a_shard(reports):
    for rep in reports:
        r = rep["entities/not_a_shard"]
        assert r["error"] == "InvalidInputError" and "model.shard(rank, world)" in r["message"], r


@pytest.mark.parametrize("where", ["rows", "scores"])
def test_entity_shards_exception_on_one_rank_ends_every_rank(reports, where):
    """Rank 1 raises in its second batch (in the query-row or the scoring phase); rank 0 is inside
    the per-batch all_reduce then and must end too (the workers' 120 s limit catches a hang)."""
    assert reports[1][f"entities/exception_{where}"]["error"] == "Boom"
    r0 = reports[0][f"entities/exception_{where}"]
    assert r0["error"] == "RankFailedError", r0
    assert "rank 1" in r0["message"] and f"shard failed in {where}" in r0["message"]


WIDE_SAMPLED = ["sampled_filtered", "sampled_unfiltered", "sampled_restricted", "sampled_auto"]


@pytest.mark.parametrize("scenario", WIDE_SAMPLED)
def test_entity_shards_score_only_their_sampled_candidates(reports, scenario):
    """400 entities, 200 per rank, 6 negatives per task, batches of 8 tasks: each call scores the
    union of the batch's local candidates (at most 8 x 7, padded to 64 columns), not the local slice;
    the rank table equals one process."""
    for rank, rep in enumerate(reports):
        r = rep[f"entities/wide/{scenario}"]
        assert r["distributed"] == r["single"] and r["protocol_diff"] == [], f"rank {rank}"
        if scenario != "sampled_auto":
            assert 0 < r["widest"] <= 8 * 7 + 64 < r["local"], r["widest"]


@pytest.mark.parametrize("scenario", ["shifted_filtered", "shifted_unfiltered"])
def test_entity_shards_rerank_chunked_batches_whose_pass_one_scores_differ(reports, scenario):
    """Pass 1 (the answer columns) scores 0.5 above the chunks: every batch's answers are flagged by
    their owner and ranked again from whole chunks, giving one process's table exactly."""
    for rank, rep in enumerate(reports):
        r = rep[f"entities/wide/{scenario}"]
        assert r["redone"] > 0, rank
        # one process holds the plain model (nothing redone); each rank counts every query of both sides once
        assert r["distributed"] == r["single"] and r["protocol_diff"] == ["chunk_redone_queries"], f"rank {rank}"
        assert r["redone_queries"] == [0, r["queries"]], f"rank {rank}"


def test_tasks_mode_protocol_is_the_same_on_every_rank(reports):
    """distributed="tasks": each rank plans its automatic chunk width from its own share of the tasks (here 3
    and 4 columns); the protocol reports the widest on every rank (it reported each rank's own, so the ranks'
    Results differed)."""
    shares = [rep["tasks/auto_chunk"]["share"] for rep in reports]
    assert len(set(shares[0])) == 2, shares  # the shares' widths differ
    protocols = [rep["tasks/auto_chunk"]["protocol"] for rep in reports]
    assert protocols[0] == protocols[1], protocols
    assert protocols[0]["entity_chunk_size"] == max(shares[0])


def test_tasks_mode_protocol_sums_the_redone_queries_of_every_rank(reports):
    """distributed="tasks": each rank re-ranks the queries of its own share whose pass-1 true scores differ
    (here all); the protocol's chunk_redone_queries is their sum over ranks, the same on every rank (it was
    not reported at all). One process counts each query once; a query whose tasks straddle the ranks'
    shares is re-ranked on both."""
    for rank, rep in enumerate(reports):
        r = rep["tasks/redone"]
        assert r["distributed"] == r["single"], f"rank {rank}"
        assert r["redone"] == r["expected"] and r["expected"][0] > 0, f"rank {rank}"


@pytest.mark.parametrize("scenario", ["chunked", "chunked_restricted"])
def test_entity_shards_chunked_in_one_pass(reports, scenario):
    """Chunked local slices score every chunk once (the answers' scores come from pass 1 on their
    columns): no re-ranking with a consistent scorer, every local column scored once per batch."""
    for rank, rep in enumerate(reports):
        r = rep[f"entities/wide/{scenario}"]
        assert r["redone"] == 0 and r["distributed"] == r["single"] and r["protocol_diff"] == [], f"rank {rank}"
        assert r["redone_queries"] == [0, 0], f"rank {rank}"
        assert r["chunk"] == (48 if scenario == "chunked" else 30)
        if scenario == "chunked":  # chunks are slices (restricted chunks are id tensors, like pass 1)
            assert r["passes"] > 0 and r["slice_columns"] == r["passes"] * r["local"], r


def test_entity_shards_stream_wide_local_slices_in_automatic_chunks(reports):
    """40,000 entities, 300 tasks per side: each rank's 20,000 local columns are chunked
    automatically on the CPU (as one process chunks its 40,000), with one process's table."""
    for rank, rep in enumerate(reports):
        r = rep["entities/wide/auto_chunks"]
        assert r["chunk"] is not None and r["widest"] <= r["chunk"] < r["local"], r["chunk"]
        assert r["distributed"] == r["single"] and r["protocol_diff"] == [], f"rank {rank}"


@pytest.mark.parametrize("scenario", ["tiles_filtered", "tiles_unfiltered", "tiles_restricted"])
def test_entity_shards_score_unaligned_local_rows_in_tiles(reports, scenario):
    """Whole local rows of unaligned length (149 columns, 99 or 100 restricted) are scored in column
    tiles (shrunk to 40 columns), as one process tiles its rows: the same rank tables."""
    for rank, rep in enumerate(reports):
        r = rep[f"entities/wide/{scenario}"]
        assert r["tiled"] > 0 and r["chunk"] is None, r
        assert r["distributed"] == r["single"] and r["protocol_diff"] == [], f"rank {rank}"


@pytest.mark.multiprocess  # ~13 s on the loaded CI box (two interpreter starts under torchrun)
def test_cli_torchrun_entities_mode_equals_one_process(tmp_path):
    """``torchrun --nproc-per-node 2 -m kgeval evaluate --model-file M --distributed entities``: each
    rank keeps half of the entity table; rank 0 alone prints the same metrics and protocol as one
    process (in-process CLI)."""
    from click.testing import CliRunner

    from kgeval.cli import main
    from kgeval.data import get_dataset
    from kgeval.models import get_model

    ds = get_dataset("nations")
    model = get_model("complex", ds.num_entities, ds.num_relations, dim=8, seed=0)
    path = tmp_path / "m.pt"
    model.save(path, entity_labels=ds.entity_labels, relation_labels=ds.relation_labels)
    args = ["evaluate", "--model-file", str(path), "--dataset", "nations", "--format", "json"]
    one = CliRunner().invoke(main, args)
    assert one.exit_code == 0, one.output
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(_free_port()), "-m", "kgeval", *args, "--distributed", "entities",
                           "--dist-timeout", str(round(scaled(60)))], env=env, capture_output=True, text=True,
                          timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = json.loads(one.output), json.loads(proc.stdout)  # one JSON document: rank 1 prints nothing
    assert b["metrics"] == a["metrics"]
    assert b["protocol"] == a["protocol"]


def _embedding_files(tmp_path):
    """DistMult embeddings of nations as .npy files (entity rows in the dataset's id order)."""
    import numpy as np

    from kgeval.data import get_dataset

    ds = get_dataset("nations")
    rng = np.random.default_rng(0)
    ent, rel = tmp_path / "ent.npy", tmp_path / "rel.npy"
    np.save(ent, rng.normal(size=(ds.num_entities, 8)).astype(np.float32))
    np.save(rel, rng.normal(size=(ds.num_relations, 8)).astype(np.float32))
    return ds, ent, rel


@pytest.mark.multiprocess  # ~13 s per mode on the loaded CI box (two interpreter starts under torchrun)
@pytest.mark.parametrize("mode", ["entities", "tasks"])
def test_cli_torchrun_entity_embeddings_equal_one_process(tmp_path, mode):
    """``torchrun ... kgeval evaluate --entity-embeddings E.npy --relation-embeddings R.npy --distributed
    entities|tasks``: rank 0 prints one process's metrics and protocol (entities: each rank maps its
    rows of E.npy, here with an entity restriction; tasks: a full model per rank, and rank 0 writes
    the --output run directory)."""
    from click.testing import CliRunner

    from kgeval.cli import main

    ds, ent, rel = _embedding_files(tmp_path)
    args = ["evaluate", "--entity-embeddings", str(ent), "--relation-embeddings", str(rel), "--interaction",
            "distmult", "--dataset", "nations", "--format", "json"]
    if mode == "entities":
        args += ["--entity-whitelist", ",".join(ds.entity_labels[i] for i in range(0, ds.num_entities, 2))]
    one = CliRunner().invoke(main, args)
    assert one.exit_code == 0, one.output
    out = ["--output", str(tmp_path / "run")] if mode == "tasks" else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(_free_port()), "-m", "kgeval", *args, *out, "--distributed", mode,
                           "--dist-timeout", str(round(scaled(60)))], env=env, capture_output=True, text=True,
                          timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = json.loads(one.output), json.loads(proc.stdout)  # one JSON document: rank 1 prints nothing
    assert b["metrics"] == a["metrics"]
    if mode == "tasks":  # each rank checks the first and last task of its own batches
        a["protocol"].pop("consistency_check"), b["protocol"].pop("consistency_check")
    assert b["protocol"] == a["protocol"]
    if mode == "tasks":
        assert json.loads((tmp_path / "run" / "config.json").read_text())["source"]["library"] == "embeddings"


def test_entity_embeddings_shard_maps_only_its_rows(tmp_path):
    """``load_external(..., shard=(rank, world))``: the rank's rows of the memory-mapped .npy file."""
    import numpy as np

    from kgeval.interop.external import load_external
    from kgeval.models import EntityShard

    ds, ent, rel = _embedding_files(tmp_path)
    model, _, what = load_external(str(ent), str(rel), "distmult", None, None, "nations", shard=(1, 2))
    lo, hi = ds.num_entities // 2, ds.num_entities
    assert isinstance(model, EntityShard) and model.entity_range == (lo, hi) and model.num_entities == hi
    assert np.array_equal(model.local.entity.weight.detach().numpy(), np.load(ent)[lo:hi])
    assert "embeddings" in what


@pytest.mark.parametrize("flag", ["--libkge-checkpoint", "--pykeen-dir", "--output"])
def test_cli_entities_mode_refuses_what_it_cannot_shard(tmp_path, flag):
    """LibKGE checkpoints and PyKEEN directories are single pickles of the whole entity table, and a run
    directory's model.pt needs the whole table: refused by name before the process group starts
    (--distributed tasks takes them all)."""
    from click.testing import CliRunner

    from kgeval.cli import main

    _, ent, rel = _embedding_files(tmp_path)
    (tmp_path / "ckpt.pt").write_bytes(b"")
    source = {"--libkge-checkpoint": ["--libkge-checkpoint", str(tmp_path / "ckpt.pt")],
              "--pykeen-dir": ["--pykeen-dir", str(tmp_path), "--trust-pickle"],
              "--output": ["--entity-embeddings", str(ent), "--relation-embeddings", str(rel), "--interaction",
                           "distmult", "--output", str(tmp_path / "run")]}[flag]
    res = CliRunner().invoke(main, ["evaluate", *source, "--dataset", "nations", "--distributed", "entities"])
    assert res.exit_code != 0
    expected = {"--libkge-checkpoint": "cannot shard a LibKGE checkpoint", "--pykeen-dir": "cannot shard a PyKEEN model",
                "--output": "--output with --distributed entities"}[flag]
    assert expected in res.output and "--distributed tasks" in res.output, res.output


@pytest.mark.parametrize("mode", ["tasks", "entities"])
def test_candidates_mode_refuses_distributed(mode):
    """OGB's given-negatives mode runs in one process: distributed= is refused by name, not ignored."""
    import numpy as np
    import torch

    import kgeval
    from kgeval.models import DistMultScorer

    scorer = DistMultScorer(torch.ones(5, 2), torch.ones(2, 2))
    with pytest.raises(InvalidInputError, match="candidates= cannot be combined with distributed="):
        kgeval.evaluate(scorer, np.array([[0, 0, 1]]), candidates={"tail_neg": np.array([[2, 3]])}, progress=False,
                        distributed=mode)


def test_the_input_fingerprint_streams_the_known_sets_without_concatenating_them():
    """Ranks compare one SHA-256 of their inputs: the known triples' part is the digest of their
    concatenation (sets split otherwise agree; one changed triple does not) but is read set by set,
    never copied into one array (12 GB for WikiKG90M's filter triples)."""
    import hashlib
    import json

    import numpy as np

    from kgeval.evaluation import distributed
    from kgeval.evaluation.inputs import prepare_inputs
    from kgeval.evaluation.options import as_options
    from kgeval.models import get_model

    rng = np.random.default_rng(5)
    test = np.stack([rng.integers(0, 30, 40), rng.integers(0, 3, 40), rng.integers(0, 30, 40)], 1)
    a, b = (np.stack([rng.integers(0, 30, n), rng.integers(0, 3, n), rng.integers(0, 30, n)], 1) for n in (200, 50))
    model = get_model("distmult", 30, 3, dim=4, seed=0).eval()
    opts = as_options({"progress": False})
    split = prepare_inputs(model, test, [a, b], opts)
    whole = prepare_inputs(model, test, [np.concatenate([a, b])], opts)
    assert not hasattr(split, "known")  # no concatenated copy of the known sets exists to hash
    digest = distributed.fingerprint(split, opts)
    assert digest == distributed.fingerprint(whole, opts)
    changed = b.copy()
    changed[3, 2] = (changed[3, 2] + 1) % 30
    assert distributed.fingerprint(prepare_inputs(model, test, [a, changed], opts), opts) != digest
    # the same digest as hashing the concatenation (shape, then bytes; then the options), as before
    h = hashlib.sha256()
    for arr in (test, np.concatenate([test, a, b]), np.zeros(0), np.zeros(0), np.ones(40)):
        h.update(repr(arr.shape).encode())
        h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    d = {k: v for k, v in opts.to_dict().items() if k not in distributed._LOCAL_OPTIONS}
    d["num_entities"], d["num_relations"] = 30, 3
    h.update(json.dumps(d, sort_keys=True, default=str).encode())
    assert h.hexdigest() == digest


def test_init_from_env_without_a_launcher_is_a_named_error(monkeypatch):
    """Without torchrun's variables the CLI's process-group start names the launcher (torch reads the
    environment; kgeval does not), instead of torch's ValueError about env:// rendezvous."""
    import torch.distributed as dist

    from kgeval.evaluation.distributed import init_from_env

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InvalidInputError, match="torchrun's environment"):
        init_from_env(5)
    assert not dist.is_initialized()
