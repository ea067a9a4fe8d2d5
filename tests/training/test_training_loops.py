"""train(): loss goes down on Nations, runs are reproducible under a seed, bad input is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import kgeval
from kgeval.errors import InvalidInputError, UnknownNameError
from kgeval.models import get_model
from kgeval.training import TrainingResult, train

NATIONS = Path(kgeval.__file__).parent / "data" / "builtin" / "nations"


def _nations_train():
    """Nations training triples as ids (positions in the sorted labels of all splits)."""
    rows = {s: [ln.split("\t") for ln in (NATIONS / f"{s}.txt").read_text().splitlines() if ln]
            for s in ("train", "valid", "test")}
    ents = sorted({x for rs in rows.values() for h, _, t in rs for x in (h, t)})
    rels = sorted({r for rs in rows.values() for _, r, _ in rs})
    e, r = {x: i for i, x in enumerate(ents)}, {x: i for i, x in enumerate(rels)}
    return np.array([[e[a], r[b], e[c]] for a, b, c in rows["train"]], dtype=np.int64), len(ents), len(rels)


TRIPLES, N_ENT, N_REL = _nations_train()

CASES = [
    ("distmult", {"inverse_relations": True}, {"loop": "lcwa"}),
    ("complex", {}, {"loop": "lcwa", "loss": "softmax", "regularizer": "n3"}),  # head queries via score_heads
    ("tucker", {"inverse_relations": True}, {"loop": "lcwa", "label_smoothing": 0.1}),
    ("rotate", {}, {"loop": "slcwa", "loss": "nssa", "num_negatives": 8}),
    ("transe", {}, {"loop": "slcwa", "loss": "margin", "num_negatives": 4}),
    ("pairre", {}, {"loop": "slcwa", "loss": "softplus", "regularizer": "l2", "optimizer": "adagrad"}),
]


@pytest.mark.parametrize(("name", "model_kw", "train_kw"), CASES, ids=[c[0] for c in CASES])
def test_loss_decreases_on_nations(name, model_kw, train_kw):
    model = get_model(name, N_ENT, N_REL, dim=16, seed=0, **model_kw)
    result = train(model, TRIPLES, epochs=3, batch_size=512, lr=0.01, seed=0, progress=False, **train_kw)
    assert isinstance(result, TrainingResult)
    assert result.epochs_run == 3 and len(result.losses) == 3 and not result.stopped_early
    assert all(np.isfinite(result.losses))
    assert result.losses[-1] < result.losses[0]
    assert result.seconds > 0 and result.seconds_per_epoch > 0
    assert not model.training  # left in eval mode


def test_weights_that_overflow_in_the_last_step_are_refused():
    """One batch per epoch: the loss is computed before the step that overflows, so it was finite and
    the model reached the evaluation with DistMult scores ~1e45 (inf/NaN in float32): the pipeline
    reported Nations test MRR 0.328 from tied inf scores (a consistency warning only)."""
    model = get_model("distmult", N_ENT, N_REL, dim=8, seed=0, inverse_relations=True)
    with pytest.raises(InvalidInputError, match="training diverged: after epoch 1 the model scores"):
        train(model, TRIPLES, epochs=1, batch_size=len(TRIPLES) * 2, lr=1e15, seed=0, progress=False)
    with pytest.raises(InvalidInputError, match="training diverged"):
        kgeval.pipeline(dataset="nations", model="distmult", model_kwargs={"dim": 8, "inverse_relations": True},
                        epochs=1, training_kwargs={"batch_size": 10**5}, optimizer_kwargs={"lr": 1e15},
                        progress=False)
    # a modest learning rate trains on unaffected
    model = get_model("distmult", N_ENT, N_REL, dim=8, seed=0, inverse_relations=True)
    train(model, TRIPLES, epochs=1, batch_size=len(TRIPLES) * 2, lr=1e-2, seed=0, progress=False)


def test_a_nan_parameter_after_the_last_step_is_refused():
    """A NaN entity row outside the probed triples (the loss was finite) is found by the parameter check."""
    from kgeval.models import DistMult

    class Breaks(DistMult):
        def post_parameter_update(self):
            with torch.no_grad():
                self.entity.weight[N_ENT - 1] = float("nan")

    model = Breaks(N_ENT, N_REL, dim=4, inverse_relations=True)  # one batch: the loss comes before the step
    unbroken = TRIPLES[(TRIPLES[:, 0] != N_ENT - 1) & (TRIPLES[:, 2] != N_ENT - 1)]
    with pytest.raises(InvalidInputError, match="parameter 'entity.weight' holds NaN"):
        train(model, unbroken, epochs=1, batch_size=10**5, seed=0, progress=False)


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize(
    ("name", "model_kw", "train_kw"),
    [("tucker", {"inverse_relations": True}, {"loop": "lcwa"}),  # dropout + batch norm
     ("rotate", {}, {"loop": "slcwa", "num_negatives": 4})],  # random negatives
)
def test_same_seed_same_model(name, model_kw, train_kw):
    runs = []
    for _ in range(2):
        model = get_model(name, N_ENT, N_REL, dim=8, seed=3, **model_kw)
        train(model, TRIPLES, epochs=2, batch_size=512, seed=7, progress=False, **train_kw)
        runs.append(_params(model))
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    model = get_model(name, N_ENT, N_REL, dim=8, seed=3, **model_kw)
    train(model, TRIPLES, epochs=2, batch_size=512, seed=8, progress=False, **train_kw)
    assert any(not torch.equal(a, b) for a, b in zip(runs[0], _params(model)))


def test_seeded_training_leaves_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    train(get_model("distmult", N_ENT, N_REL, dim=4), TRIPLES, epochs=1, seed=1, progress=False)
    assert torch.equal(torch.rand(3), expected)


def test_callback_sees_every_epoch_and_can_stop():
    seen = []

    def callback(epoch, loss, model):
        seen.append((epoch, loss))
        return epoch == 3

    result = train(get_model("distmult", N_ENT, N_REL, dim=4), TRIPLES, epochs=10, callback=callback,
                   progress=False)
    assert [e for e, _ in seen] == [1, 2, 3]
    assert result.epochs_run == 3 and result.stopped_early
    assert [loss for _, loss in seen] == result.losses


def test_progress_bar_reports_loss(capsys):
    train(get_model("distmult", N_ENT, N_REL, dim=4), TRIPLES, epochs=2, progress=True)
    err = capsys.readouterr().err
    assert "loss=" in err


def _model():
    return get_model("distmult", N_ENT, N_REL, dim=4)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"loss": "bcee"}, UnknownNameError, "bce"),
        ({"loss": "margin"}, InvalidInputError, "lcwa"),  # sLCWA-only loss in the LCWA loop
        ({"loop": "slcwa", "loss": "softmax"}, InvalidInputError, "slcwa"),
        ({"loss_kwargs": {"margni": 1}}, InvalidInputError, "margni"),
        ({"loop": "lcwaa"}, UnknownNameError, "lcwa"),
        ({"optimizer": "adamm"}, UnknownNameError, "adam"),
        ({"regularizer": "n4"}, UnknownNameError, "n3"),
        ({"epochs": 0}, InvalidInputError, "epochs"),
        ({"batch_size": -1}, InvalidInputError, "batch_size"),
        ({"num_negatives": 0}, InvalidInputError, "num_negatives"),
        # refused before any allocation (the cap counts the batch as it really is: at most #triples)
        ({"loop": "slcwa", "num_negatives": 2**30}, InvalidInputError, r"batch_size x num_negatives = \d+ x 1073741824"),
        ({"lr": 0.0}, InvalidInputError, "lr"),
        ({"label_smoothing": 1.0}, InvalidInputError, "label_smoothing"),
        ({"num_entities": N_ENT + 1}, InvalidInputError, "num_entities"),
        ({"stopper": "early"}, InvalidInputError, "stopper"),
        ({"loop": "slcwa", "loss": "margin", "loss_kwargs": {"margin": "wide"}}, InvalidInputError, "margin"),
    ],
)
def test_bad_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        train(_model(), TRIPLES, progress=False, epochs=kwargs.pop("epochs", 1), **kwargs)


@pytest.mark.parametrize(
    ("triples", "match"),
    [
        (np.array([[0, 0, N_ENT]]), "tail"),
        (np.array([[-1, 0, 0]]), "head"),
        (np.array([[0, N_REL, 0]]), "relation"),
        (np.zeros((4, 2), dtype=np.int64), "shape"),
        (np.zeros((0, 3), dtype=np.int64), "empty"),
        (np.zeros((2, 3), dtype=np.float64), "integer"),
    ],
)
def test_bad_triples(triples, match):
    with pytest.raises(InvalidInputError, match=match):
        train(_model(), triples, epochs=1, progress=False)


def test_unknown_model_name_suggests():
    with pytest.raises(UnknownNameError, match="Did you mean: rotate"):
        get_model("rotat", N_ENT, N_REL)


@pytest.mark.parametrize("name", ["rotate", "transe", "complex"])
def test_gathered_negatives_equal_scored_negatives(monkeypatch, name):
    """The 1-to-all shortcut for sLCWA negatives (few entities) trains the same model as scoring triples."""
    import kgeval.training.epochs as epochs

    runs = []
    for ratio in (epochs.GATHER_NEGATIVES_RATIO, 0):
        monkeypatch.setattr(epochs, "GATHER_NEGATIVES_RATIO", ratio)
        model = get_model(name, N_ENT, N_REL, dim=8, seed=0).double()
        result = train(model, TRIPLES[:300], loop="slcwa", num_negatives=N_ENT, epochs=2, batch_size=128, seed=0,
                       progress=False)
        runs.append((result.losses, _params(model)))
    assert runs[0][0] == pytest.approx(runs[1][0], rel=1e-9)
    for a, b in zip(runs[0][1], runs[1][1]):
        torch.testing.assert_close(a, b)


def test_a_scorer_without_parameters_is_refused():
    from kgeval.evaluation import FunctionScorer

    scorer = FunctionScorer(lambda h, r, t: (h + r + t).float(), N_ENT, N_REL)
    with pytest.raises(InvalidInputError, match="no trainable parameters"):
        train(scorer, TRIPLES, epochs=1, progress=False)


@pytest.mark.parametrize(("loop", "method"), [("lcwa", "score_tails"), ("lcwa", "score_heads"),
                                              ("slcwa", "score_triples")])
def test_a_score_of_the_wrong_shape_is_named(monkeypatch, loop, method):
    model = get_model("distmult", N_ENT, N_REL, dim=4)
    real = getattr(model, method)
    monkeypatch.setattr(model, method, lambda *a, **k: real(*a, **k)[..., :-1])  # one score short
    with pytest.raises(InvalidInputError, match=f"{method} returned shape"):
        train(model, TRIPLES, loop=loop, epochs=1, progress=False)


def test_unknown_name_messages_use_english_plurals():
    """'Known losss' / 'Known entitys' read as typos in a user-facing error."""
    from kgeval.errors import unknown_name

    assert "Known losses: bce" in str(unknown_name("loss", "x", ["bce"]))
    assert "Known entities: a" in str(unknown_name("entity", "x", ["a"]))
    assert "Known metrics: mrr" in str(unknown_name("metric", "x", ["mrr"]))
    assert "Known keys: k" in str(unknown_name("key", "x", ["k"]))


@pytest.mark.parametrize("bad, match", [(lambda s: s.to_sparse(), "sparse_coo tensor"),
                                        (lambda s: torch.empty(s.shape, device="meta"), "'meta' device"),
                                        (lambda s: s.to(torch.complex64), "floating-point scores")])
def test_impossible_training_scores_are_named(monkeypatch, bad, match):
    """Before: torch's 'Cannot assign to a sparse tensor' / 'Cannot copy out of meta tensor' from the loss."""
    model = get_model("distmult", N_ENT, N_REL, dim=4)
    real = model.score_tails
    monkeypatch.setattr(model, "score_tails", lambda *a, **k: bad(real(*a, **k)))
    with pytest.raises(InvalidInputError, match=f"the model's score_tails .*{match}"):
        train(model, TRIPLES, loop="lcwa", epochs=1, progress=False)
