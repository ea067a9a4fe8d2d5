"""save -> load_model round trips; foreign, corrupt and code-bearing files are refused."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from kgeval.errors import InvalidInputError
from kgeval.models import get_model, load_model, model_names


@pytest.mark.parametrize("name", model_names())
@pytest.mark.parametrize("inverse", [False, True])
def test_round_trip_gives_identical_scores(tmp_path, name, inverse):
    kw = {"p": 1} if name == "transe" else {}
    model = get_model(name, 7, 3, dim=5, inverse_relations=inverse, seed=1, **kw)
    if name == "tucker":  # non-default running statistics must survive too
        with torch.no_grad():
            model.bn0.running_mean.fill_(0.3)
    model.eval()
    path = tmp_path / "model.pt"
    model.save(path)
    loaded = load_model(path).eval()
    assert type(loaded) is type(model)
    assert loaded.config() == model.config()
    h, r = torch.tensor([0, 4, 6]), torch.tensor([2, 0, 1])
    assert torch.equal(loaded.score_tails(h, r), model.score_tails(h, r))
    assert torch.equal(loaded.score_heads(r, h), model.score_heads(r, h))


def test_a_loaded_model_is_in_eval_mode(tmp_path):
    """load_model gave a module in training mode: kgeval.evaluate(load_model(path), ...) of a TuckER ran its
    dropout (Nations, two evaluations of one file: MRR 0.4055 and 0.3926 for the run's 0.4146) and its batch
    norms learned the evaluation batches' statistics, changing the model."""
    import numpy as np

    import kgeval
    from kgeval.data import get_dataset

    ds = get_dataset("nations")
    model = get_model("tucker", ds.num_entities, ds.num_relations, dim=8, seed=0)
    with torch.no_grad():
        model.bn0.running_mean.uniform_(-0.5, 0.5)
    model.eval()
    path = tmp_path / "t.pt"
    model.save(path)
    expected = kgeval.evaluate(model, ds.testing, filter_triples=[ds.training, ds.validation], progress=False)
    loaded = load_model(path)
    assert not loaded.training and not loaded.bn0.training and not loaded.input_dropout.training
    stats = loaded.bn0.running_mean.clone()
    for _ in range(2):
        got = kgeval.evaluate(loaded, ds.testing, filter_triples=[ds.training, ds.validation], progress=False)
        assert np.array_equal(got.rank_table.optimistic, expected.rank_table.optimistic)
        assert np.array_equal(got.rank_table.pessimistic, expected.rank_table.pessimistic)
    assert torch.equal(loaded.bn0.running_mean, stats)
    assert not load_model(path, shard=(0, 2)).training


def test_saved_file_is_plain_dict(tmp_path):
    path = tmp_path / "m.pt"
    get_model("rotate", 5, 2, dim=3).save(path)
    blob = torch.load(path, weights_only=True)
    assert blob["format"] == "kgeval-model"
    assert blob["config"]["name"] == "rotate" and "kgeval_version" in blob["config"]
    assert all(isinstance(v, torch.Tensor) for v in blob["state_dict"].values())


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch pwned-by-kgeval-test",))


def test_pickle_bearing_file_is_refused_without_executing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.pt"
    torch.save({"format": "kgeval-model", "payload": _Payload()}, path)
    with pytest.raises(InvalidInputError, match="evil.pt"):
        load_model(path)
    assert not (tmp_path / "pwned-by-kgeval-test").exists()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_plain_pickle_file_is_refused(tmp_path):
    path = tmp_path / "plain.pkl"
    with open(path, "wb") as fh:
        pickle.dump({"a": 1}, fh)
    with pytest.raises(InvalidInputError, match="plain.pkl"):
        load_model(path)


@pytest.mark.parametrize(
    "blob",
    [
        {"weights": torch.zeros(3)},  # a foreign torch file
        {"format": "kgeval-model", "config": {"name": "transe"}, "state_dict": {}},  # missing fields
        {"format": "kgeval-model", "config": {"name": "nope", "num_entities": 3, "num_relations": 2, "dim": 2},
         "state_dict": {}},
        [1, 2, 3],
    ],
)
def test_foreign_files_are_refused(tmp_path, blob):
    path = tmp_path / "foreign.pt"
    torch.save(blob, path)
    with pytest.raises(InvalidInputError, match="foreign.pt"):
        load_model(path)


def test_mismatched_state_dict_is_refused(tmp_path):
    path = tmp_path / "m.pt"
    get_model("distmult", 5, 2, dim=3).save(path)
    blob = torch.load(path, weights_only=True)
    blob["state_dict"]["entity.weight"] = torch.zeros(4, 3)
    torch.save(blob, path)
    with pytest.raises(InvalidInputError, match="m.pt"):
        load_model(path)


def test_garbage_and_missing_files(tmp_path):
    path = tmp_path / "garbage.pt"
    path.write_bytes(b"\x00not a torch file at all")
    with pytest.raises(InvalidInputError, match="garbage.pt"):
        load_model(path)
    with pytest.raises(InvalidInputError, match="missing.pt"):
        load_model(tmp_path / "missing.pt")


def test_changed_weights_are_refused_outside_a_run(tmp_path):
    """Issue 7 item 3 for a bare model file: the weights carry their own sha256."""
    path = tmp_path / "m.pt"
    get_model("distmult", 50, 4, dim=64, seed=0).save(path)
    blob = torch.load(path, weights_only=True)
    name = next(iter(blob["state_dict"]))
    blob["state_dict"][name].view(-1)[:25] += 1e-3  # what flipped bytes in the tensor data do
    torch.save(blob, path)
    with pytest.raises(InvalidInputError, match="do not match their checksum"):
        load_model(path)
    get_model("distmult", 50, 4, dim=64, seed=0).save(path)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 100] = bytes(b ^ 0xFF for b in data[middle:middle + 100])
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidInputError, match="corrupt|not a readable"):
        load_model(path)


def test_labels_round_trip_and_are_checked(tmp_path):
    path = tmp_path / "m.pt"
    get_model("distmult", 2, 1, dim=3).save(path, entity_labels=["a", "b"], relation_labels=["r"])
    loaded = load_model(path)
    assert loaded.entity_labels == ["a", "b"] and loaded.relation_labels == ["r"]
    get_model("distmult", 2, 1, dim=3).save(path)
    assert load_model(path).entity_labels is None
    blob = torch.load(path, weights_only=True)
    blob["labels"] = {"entities": ["a"], "relations": ["r"]}
    torch.save(blob, path)
    with pytest.raises(InvalidInputError, match="entity labels do not match"):
        load_model(path)


def test_unknown_model_option_lists_every_accepted_option():
    # the message listed "allowed: []" for DistMult although dim/seed/inverse_relations are accepted
    import pytest

    from kgeval.errors import InvalidInputError
    from kgeval.models import get_model

    with pytest.raises(InvalidInputError) as info:
        get_model("distmult", num_entities=5, num_relations=2, dimm=3)
    message = str(info.value)
    assert "'dimm'" in message
    for name in ("dim", "seed", "inverse_relations"):
        assert name in message.split("allowed:")[1]
    get_model("distmult", num_entities=5, num_relations=2, dim=3, seed=0, inverse_relations=True)


def test_a_model_too_large_for_memory_is_named():
    """dim=10**11 was a raw allocator traceback from deep inside torch."""
    from kgeval.errors import InvalidInputError
    from kgeval.models import get_model

    with pytest.raises(InvalidInputError, match=r"model .distmult. with dim=10{15} .* does not fit in memory"):
        get_model("distmult", 14, 55, dim=10**15)  # beyond any address space, even with overcommit
