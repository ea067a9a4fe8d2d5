"""Real PyKEEN 1.11.1 models (trained here on Nations for one epoch, tiny dims): kgeval's rank
tables equal PyKEEN's own RankBasedEvaluator ranks, with and without inverse triples, and
``from_pykeen`` models score identically."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
import torch

import kgeval
from kgeval.errors import InvalidInputError
from kgeval.evaluation.batches import auto_batch
from kgeval.interop.pykeen import PyKEENScorer
from kgeval.interop import from_pykeen
from kgeval.models import load_model
from kgeval.ranks import SIDE_HEAD, SIDE_TAIL

pytest.importorskip("pykeen")
from pykeen.datasets import Nations  # noqa: E402
from pykeen.evaluation import RankBasedEvaluator  # noqa: E402
from pykeen.models import ComplEx, DistMult, PairRE, RotatE, TransE, TuckER  # noqa: E402
from pykeen.training import LCWATrainingLoop  # noqa: E402

FAMILIES = {"TransE": (TransE, {}), "DistMult": (DistMult, {}), "ComplEx": (ComplEx, {}), "RotatE": (RotatE, {}),
            "PairRE": (PairRE, {}), "TuckER": (TuckER, {"relation_dim": 4})}


@pytest.fixture(scope="module")
def datasets():
    logging.getLogger("pykeen").setLevel(logging.ERROR)
    return {inv: Nations(create_inverse_triples=inv) for inv in (False, True)}


def _train(ds, family: str):
    cls, kw = FAMILIES[family]
    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore")
        # PyKEEN's loop runs gc.collect() twice per call (0.4 s in a large test process) and searches
        # a sub-batch size unless given one: neither changes the model
        mp.setattr("gc.collect", lambda *a: 0)
        model = cls(triples_factory=ds.training, embedding_dim=6, random_seed=1, **kw)
        LCWATrainingLoop(model=model, triples_factory=ds.training).train(
            triples_factory=ds.training, num_epochs=1, batch_size=256, sub_batch_size=256, use_tqdm=False,
            drop_last=False)
    return model.eval()


@pytest.fixture(scope="module")
def trained(datasets):
    return {(f, inv): _train(datasets[inv], f) for f in FAMILIES for inv in (False, True)}


def _filters(ds):
    return [ds.training.mapped_triples, ds.validation.mapped_triples]


def _pykeen_ranks(model, ds):
    ev = RankBasedEvaluator(clear_on_finalize=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ev.evaluate(model, ds.testing.mapped_triples, additional_filter_triples=_filters(ds), batch_size=64,
                    use_tqdm=False)
    return {(side, kind): np.concatenate(ev.ranks[side, kind]) for side in ("head", "tail")
            for kind in ("optimistic", "pessimistic")}


def _kgeval_ranks(table):
    out = {}
    for side, code in (("head", SIDE_HEAD), ("tail", SIDE_TAIL)):
        sel = table.side == code
        order = np.argsort(table.triple_index[sel], kind="stable")
        out[side, "optimistic"] = table.optimistic[sel][order]
        out[side, "pessimistic"] = table.pessimistic[sel][order]
    return out


@pytest.mark.parametrize("inverse", [False, True], ids=["plain", "inverse"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_rank_tables_equal_pykeens(trained, datasets, family, inverse):
    model, ds = trained[family, inverse], datasets[inverse]
    res = kgeval.evaluate(model, ds.testing.mapped_triples, filter_triples=_filters(ds), progress=False)
    ours, theirs = _kgeval_ranks(res.rank_table), _pykeen_ranks(model, ds)
    for key in theirs:
        assert np.array_equal(ours[key], theirs[key]), f"{family} inverse={inverse}: {key} ranks differ"
    assert res.protocol["consistency_check"]["mismatches"] == 0


@pytest.mark.parametrize("inverse", [False, True], ids=["plain", "inverse"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_from_pykeen_scores_identical_and_saves_without_pykeen_code(trained, family, inverse, tmp_path):
    model = trained[family, inverse]
    ours = from_pykeen(model)
    assert ours.inverse_relations is inverse and ours.num_relations == model.num_real_relations
    path = tmp_path / "m.pt"
    ours.save(path)
    loaded = load_model(path).eval()  # weights_only loading
    h = torch.arange(model.num_entities) % model.num_entities
    r = torch.arange(model.num_entities) % model.num_real_relations
    with torch.no_grad():
        ref_t = model.predict_t(torch.stack([h, r], 1))
        ref_h = model.predict_h(torch.stack([r, h], 1))
        for m in (ours, loaded):
            torch.testing.assert_close(m.score_tails(h, r), ref_t, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(m.score_heads(r, h), ref_h, rtol=1e-5, atol=1e-5)


def test_consistency_check_catches_raw_relation_ids(trained, datasets):
    """The old adapter (score_t / score_h with raw relation ids) is caught by the check."""
    model, ds = trained["DistMult", True], datasets[True]

    class RawIds(PyKEENScorer):
        def score_heads(self, relations, tails, entities=None):
            return self.model.score_h(torch.stack([relations, tails], 1), heads=self._ids(entities))

    with pytest.warns(UserWarning, match="consistency check failed"):
        kgeval.evaluate(RawIds(model), ds.testing.mapped_triples, filter_triples=_filters(ds), progress=False,
                        sides="head")


def test_labels_and_triples_factories_map_through_the_factory(trained, datasets):
    model, ds = trained["ComplEx", True], datasets[True]
    ref = kgeval.evaluate(model, ds.testing.mapped_triples, filter_triples=_filters(ds), progress=False).rank_table
    by_factory = kgeval.evaluate(model, ds.testing, filter_triples=[ds.training, ds.validation], progress=False)
    labels = ds.testing.triples  # (n, 3) label array
    scorer = PyKEENScorer(model, triples_factory=ds.training)
    by_labels = kgeval.evaluate(scorer, labels, filter_triples={"train": ds.training.triples,
                                                                "valid": ds.validation.triples}, progress=False)
    for got in (by_factory.rank_table, by_labels.rank_table):
        assert np.array_equal(got.optimistic, ref.optimistic) and np.array_equal(got.pessimistic, ref.pessimistic)
    with pytest.raises(InvalidInputError, match="unknown to the TriplesFactory"):
        kgeval.evaluate(scorer, [["nope", labels[0][1], labels[0][2]]], progress=False)
    with pytest.raises(InvalidInputError, match="holds labels"):
        kgeval.evaluate(model, labels, progress=False)


def test_factory_of_another_size_is_a_named_error(trained):
    from pykeen.datasets import Kinships

    with pytest.raises(InvalidInputError, match="do not belong together"):
        PyKEENScorer(trained["DistMult", False], triples_factory=Kinships().training)


def test_relation_ids_are_real_relations(trained, datasets):
    model, ds = trained["DistMult", True], datasets[True]
    assert PyKEENScorer(model).num_relations == ds.training.real_num_relations
    bad = np.array([[0, ds.training.real_num_relations, 1]])  # a raw inverse row id is out of range
    with pytest.raises(InvalidInputError, match="relation"):
        kgeval.evaluate(model, bad, progress=False)


def test_broadcasting_scorers_get_smaller_batches(trained):
    """PyKEEN's TransE builds batch x entities x dim: its measured cost per score exceeds 4 * dim
    bytes, so the planner gives it fewer rows than the score matrix alone would."""
    scorer = PyKEENScorer(trained["TransE", False])
    assert scorer.score_bytes >= 4 * 6
    assert auto_batch(1 << 20, 14541, 10**6, extra=scorer.score_bytes) < auto_batch(1 << 20, 14541, 10**6) / 2


def test_unsupported_interaction_is_named(datasets):
    from pykeen.models import HolE

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = HolE(triples_factory=datasets[False].training, embedding_dim=4, random_seed=1)
    with pytest.raises(InvalidInputError, match="supported: TransE, DistMult, ComplEx, RotatE, PairRE, TuckER"):
        from_pykeen(model)


def test_entity_chunks_go_through_pykeens_candidate_restriction(trained, datasets):
    """Chunked scoring (predict_t / predict_h with tails= / heads=) gives the whole-row ranks."""
    model, ds = trained["RotatE", True], datasets[True]
    full = kgeval.evaluate(model, ds.testing.mapped_triples, filter_triples=_filters(ds), progress=False)
    chunked = kgeval.evaluate(model, ds.testing.mapped_triples, filter_triples=_filters(ds), progress=False,
                              entity_chunk_size=4)
    assert chunked.protocol["entity_chunk_size"] == 4
    for col in ("optimistic", "pessimistic", "num_candidates"):
        assert np.array_equal(getattr(chunked.rank_table, col), getattr(full.rank_table, col))


# metrics where kgeval deliberately differs under weights (README, "Where kgeval deliberately differs"):
# the weighted MAD's scale; PyKEEN's variance / standard deviation ignore the weights; PyKEEN's weighted
# inverse median rank takes np.reciprocal of an integer median (1 / 4 -> 0) for optimistic / pessimistic ranks
_WEIGHTED_DIFFERENCES = ("median_absolute_deviation", "variance", "standard_deviation", "inverse_median_rank")


@pytest.mark.parametrize("macro", [False, True], ids=["micro", "macro"])
@pytest.mark.parametrize("seed", [0, 1])
def test_restricted_and_macro_metrics_equal_pykeens(macro, seed):
    """Entity + relation restriction (test triples outside dropped, candidates restricted) and
    PyKEEN's macro evaluator's weights: every common metric of the flat results equals PyKEEN's.
    A DistMult with small integer embeddings: exact scores with many ties, so all rank types
    and the tie handling are compared too."""
    from pykeen.evaluation import MacroRankBasedEvaluator
    from pykeen.triples import TriplesFactory

    rng = np.random.default_rng(seed)
    ne, nr = 24, 3
    allt = rng.permutation(np.unique(np.stack([rng.integers(0, ne, 300), rng.integers(0, nr, 300),
                                               rng.integers(0, ne, 300)], 1), axis=0))
    train, test = allt[:200], allt[200:240]
    tf = TriplesFactory(mapped_triples=torch.as_tensor(train), entity_to_id={str(i): i for i in range(ne)},
                        relation_to_id={str(i): i for i in range(nr)})
    model = DistMult(triples_factory=tf, embedding_dim=3, random_seed=0)
    with torch.no_grad():
        for rep, n in ((model.entity_representations[0], ne), (model.relation_representations[0], nr)):
            rep._embeddings.weight.copy_(torch.as_tensor(rng.integers(-2, 3, (n, 3)), dtype=torch.float32))
    model.eval()
    ents, rels = sorted(rng.choice(ne, 17, replace=False).tolist()), [0, 2]
    evaluator = (MacroRankBasedEvaluator if macro else RankBasedEvaluator)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = evaluator.evaluate(model, torch.as_tensor(test), additional_filter_triples=[torch.as_tensor(train)],
                                    batch_size=7, use_tqdm=False, pre_filtered_triples=False,
                                    restrict_entities_to=ents, restrict_relations_to=rels).to_flat_dict()
        ours = kgeval.evaluate(model, test, filter_triples=[train], macro=macro, restrict_entities=ents,
                               restrict_relations=rels, progress=False)
    assert ours.protocol["restriction"]["num_triples_dropped"] > 0 and ours.rank_table.num_candidates.max() <= len(ents)
    flat = ours.to_flat_dict()
    common = [k for k in theirs if k in flat and not (macro and k.split(".")[-1] in _WEIGHTED_DIFFERENCES)
              and "median_absolute_deviation" not in k]
    assert len(common) > 150
    for key in common:
        # (PyKEEN keeps realistic ranks in float32: ~1e-7 relative)
        assert flat[key] == pytest.approx(theirs[key], rel=1e-5, abs=1e-6), key


def test_labels_map_through_a_permuted_factory_like_pykeens_evaluator(datasets):
    """The model's own factory numbers the labels in a random order (not PyKEEN's sorted default), with
    inverse triples: label triples mapped through it get PyKEEN's ranks for the same labelled triple,
    and the realistic MRR equals PyKEEN's. An adapter that used the dataset's default ids, or mapped
    only one column, would rank other triples."""
    from pykeen.triples import TriplesFactory

    base = datasets[False]
    rng = np.random.default_rng(7)
    ents, rels = sorted(base.training.entity_to_id), sorted(base.training.relation_to_id)
    e2i = {x: int(i) for x, i in zip(ents, rng.permutation(len(ents)))}
    r2i = {x: int(i) for x, i in zip(rels, rng.permutation(len(rels)))}
    assert e2i != base.training.entity_to_id and r2i != base.training.relation_to_id

    def factory(tf, inverse=False):
        return TriplesFactory.from_labeled_triples(tf.triples, entity_to_id=e2i, relation_to_id=r2i,
                                                   create_inverse_triples=inverse)

    train, valid, test = factory(base.training, True), factory(base.validation), factory(base.testing)
    model = _train(type("DS", (), {"training": train})(), "DistMult")
    ev = RankBasedEvaluator(clear_on_finalize=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = ev.evaluate(model, test.mapped_triples, batch_size=64, use_tqdm=False,
                             additional_filter_triples=[train.mapped_triples, valid.mapped_triples])
    labels = base.testing.triples
    res = kgeval.evaluate(PyKEENScorer(model, triples_factory=train), labels,
                          filter_triples=[base.training.triples, base.validation.triples], progress=False)
    t = res.rank_table
    as_ids = np.array([[e2i[h], r2i[r], e2i[x]] for h, r, x in labels], dtype=np.int64)
    pk_ids = test.mapped_triples.numpy()
    for side, code in (("head", SIDE_HEAD), ("tail", SIDE_TAIL)):
        sel = t.side == code
        for kind, ours in (("optimistic", t.optimistic[sel]), ("pessimistic", t.pessimistic[sel])):
            got = sorted(zip(map(tuple, as_ids[t.triple_index[sel]].tolist()), ours.tolist()))
            want = sorted(zip(map(tuple, pk_ids.tolist()), np.concatenate(ev.ranks[side, kind]).tolist()))
            assert got == want, f"{side} {kind} ranks differ"
    key = "both.realistic.inverse_harmonic_mean_rank"
    assert res.to_flat_dict()[key] == pytest.approx(theirs.to_flat_dict()[key], rel=1e-6)


def test_exported_inverse_embeddings_need_the_documented_reordering(trained, datasets):
    """PyKEEN's inverse-triple relation table (r at 2r, its inverse at 2r + 1), reordered as the CLI help
    and README say (``concatenate(rel[0::2], rel[1::2])``), gives PyKEEN's ranks through
    ``from_embeddings``; the interleaved table as stored gives other head ranks (no error can tell)."""
    from kgeval.models import from_embeddings

    model, ds = trained["ComplEx", True], datasets[True]
    with torch.no_grad():
        ent = model.entity_representations[0](indices=None)
        rel = model.relation_representations[0](indices=None)
    theirs = _pykeen_ranks(model, ds)
    heads = {}
    for layout, table in (("reordered", torch.cat([rel[0::2], rel[1::2]])), ("interleaved", rel)):
        ours = from_embeddings("complex", ent, table, inverse_relations=True, num_entities=model.num_entities,
                               num_relations=model.num_real_relations)
        res = kgeval.evaluate(ours, ds.testing.mapped_triples, filter_triples=_filters(ds), progress=False)
        heads[layout] = _kgeval_ranks(res.rank_table)
    for key in theirs:
        assert np.array_equal(heads["reordered"][key], theirs[key]), key
    assert not np.array_equal(heads["interleaved"]["head", "optimistic"], theirs["head", "optimistic"])
    # the README's other trap: PyKEEN's raw float weights hold complex rows interleaved (re0, im0, ...)
    raw = model.entity_representations[0]._embeddings.weight.detach()
    assert torch.equal(raw, torch.view_as_real(ent).reshape(raw.shape))
    ours = from_embeddings("complex", raw, torch.cat([rel[0::2], rel[1::2]]), inverse_relations=True)
    res = kgeval.evaluate(ours, ds.testing.mapped_triples, filter_triples=_filters(ds), progress=False)
    assert not np.array_equal(_kgeval_ranks(res.rank_table)["tail", "optimistic"], theirs["tail", "optimistic"])


def test_filter_factories_with_other_label_maps_are_refused_with_id_triples(trained, datasets):
    """Test triples given as ids and two filter factories numbering the labels differently: the second
    factory's ids mean other entities, so it is refused (it was checked for its size only)."""
    from pykeen.triples import TriplesFactory

    model, ds = trained["DistMult", False], datasets[False]
    e2i = {x: len(ds.training.entity_to_id) - 1 - i for x, i in ds.training.entity_to_id.items()}
    other = TriplesFactory.from_labeled_triples(ds.validation.triples, entity_to_id=e2i,
                                                relation_to_id=ds.training.relation_to_id)
    with pytest.raises(InvalidInputError, match="differ from the training factory"):
        kgeval.evaluate(model, ds.testing.mapped_triples, filter_triples=[ds.training, other], progress=False)
    kgeval.evaluate(model, ds.testing.mapped_triples, filter_triples=[ds.training, ds.validation], progress=False)


def test_triples_factory_given_to_a_converted_model_names_mapped_triples(trained, datasets):
    """A converted model (no PyKEEN code) given a TriplesFactory failed with 'triples must hold integer
    ids, got dtype object'; the error now says what to pass."""
    ds = datasets[False]
    ours = from_pykeen(trained["DistMult", False])
    with pytest.raises(InvalidInputError, match=r"TriplesFactory: pass its id triples, factory\.mapped_triples"):
        kgeval.evaluate(ours, ds.testing, progress=False)
    with pytest.raises(InvalidInputError, match="filter_triples is a PyKEEN TriplesFactory"):
        kgeval.evaluate(ours, ds.testing.mapped_triples, filter_triples=ds.training, progress=False)
    res = kgeval.evaluate(ours, ds.testing.mapped_triples, filter_triples=_filters(ds), progress=False)
    assert 0 < res["mrr"] <= 1


def _cooccurrence_filtered(ds):
    from pykeen.models import CooccurrenceFilteredModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = CooccurrenceFilteredModel(triples_factory=ds.training, base="distmult",
                                          embedding_dim=6, random_seed=1)
    return model.eval()


@pytest.mark.parametrize("chunk", [None, 4], ids=["rows", "chunk4"])
def test_models_without_entity_subsets_get_pykeens_ranks(datasets, chunk):
    """PyKEEN's CooccurrenceFilteredModel masks whole rows (-inf where h and t never co-occur) and
    cannot score entity subsets (its predict_t(tails=) raises IndexError): kgeval scores its
    whole rows, as PyKEEN's evaluator does, and gets PyKEEN's ranks (with entity_chunk_size too)."""
    ds = datasets[False]
    model = _cooccurrence_filtered(ds)
    assert not PyKEENScorer(model).entity_subsets
    assert PyKEENScorer(model.base).entity_subsets  # its DistMult scores subsets: chunked as before
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # entity_chunk_size: 'entity chunking is impossible'
        res = kgeval.evaluate(model, ds.testing.mapped_triples, filter_triples=_filters(ds), progress=False,
                              entity_chunk_size=chunk)
    ours, theirs = _kgeval_ranks(res.rank_table), _pykeen_ranks(model, ds)
    assert any(np.isinf(model.predict_t(ds.testing.mapped_triples[:, :2]).detach().numpy()).ravel())
    for key in theirs:
        assert np.array_equal(ours[key], theirs[key]), key
    assert res.protocol["consistency_check"]["mismatches"] == 0


def test_consistency_triples_of_whole_row_models_are_their_row_scores(datasets):
    """The consistency check's triple score of a whole-row model is its predict_* score (-inf where the
    model masks it); score_hrt gives the unmasked base score, which the check would call a mismatch."""
    ds = datasets[False]
    model = _cooccurrence_filtered(ds)
    scorer = PyKEENScorer(model)
    h = torch.arange(ds.num_entities).repeat_interleave(2)
    r = torch.zeros_like(h)
    t = torch.arange(2 * ds.num_entities) % ds.num_entities
    with torch.no_grad():
        rows_t, rows_h = model.predict_t(torch.stack([h, r], 1)), model.predict_h(torch.stack([r, t], 1))
        want_t, want_h = rows_t[torch.arange(len(h)), t], rows_h[torch.arange(len(h)), h]
        assert torch.isinf(want_t).any()
        # (alone vs in a 28-row batch: the finite scores may differ in the last bit)
        torch.testing.assert_close(scorer.score_triples(h, r, t), want_t, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(scorer.score_head_triples(h, r, t), want_h, rtol=1e-5, atol=1e-6)


def test_inductive_models_are_refused_by_name(datasets):
    """An inductive PyKEEN model needs mode= (which inference graph): PyKEENScorer does not pass one,
    so it is refused by name instead of PyKEEN's ValueError from deep inside the first score call."""
    from pykeen.models import InductiveNodePiece

    ds = datasets[True]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = InductiveNodePiece(triples_factory=ds.training, inference_factory=ds.training, num_tokens=2,
                                   embedding_dim=4, random_seed=1)
    with pytest.raises(InvalidInputError, match="InductiveNodePiece is an inductive PyKEEN model"):
        kgeval.evaluate(model, ds.testing.mapped_triples, progress=False)


@pytest.mark.parametrize("rows", [10, 20])
def test_representations_of_another_size_are_named(datasets, rows):
    """An entity table of 10 rows for a 14-entity model made predict_t raise a bare IndexError ('index out of
    range in self'); one of 20 rows gave score rows of 20 columns. Both are refused by name."""
    from pykeen.nn import Embedding

    ds = datasets[False]
    model = DistMult(triples_factory=ds.training, embedding_dim=4, random_seed=1)
    model.entity_representations[0] = Embedding(max_id=rows, shape=(4,))
    with pytest.raises(InvalidInputError, match=f"entity_representations\\[0\\] \\(Embedding\\) has {rows} rows but "
                                                "the model has num_entities=14"):
        kgeval.evaluate(model.eval(), ds.testing.mapped_triples[:5], progress=False, filtered=False)
    model = DistMult(triples_factory=datasets[True].training, embedding_dim=4, random_seed=1)
    model.relation_representations[0] = Embedding(max_id=model.num_real_relations, shape=(4,))
    with pytest.raises(InvalidInputError, match="num_relations=110 \\(inverse relations included\\)"):
        PyKEENScorer(model)


def test_parameterless_baselines_are_named(datasets):
    """PyKEEN 1.11's baselines have no parameters: their own predict_t fails on model.device
    (DeviceResolutionError, as does RankBasedEvaluator); kgeval names the model and the cause."""
    from pykeen.models import MarginalDistributionBaseline

    model = MarginalDistributionBaseline(triples_factory=datasets[False].training)
    with pytest.raises(InvalidInputError, match="MarginalDistributionBaseline has no parameters or buffers"):
        kgeval.evaluate(model, datasets[False].testing.mapped_triples, progress=False)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_from_pykeen_refuses_other_precisions(datasets, dtype):
    """from_pykeen of a float64 PyKEEN model gave a float32 kgeval model: with entity rows 1e-9 apart,
    110 of 402 optimistic ranks differed from the PyKEEN model's own (DistMult dim 50, seed 0;
    its float64 scores do not tie).
    Converting any precision but float32 is now refused by name; the PyKEEN model itself ranks exactly."""
    ds = datasets[False]
    model = DistMult(triples_factory=ds.training, embedding_dim=6, random_seed=1).to(dtype).eval()
    with torch.no_grad():
        w = model.entity_representations[0]._embeddings.weight
        w[1::2] = w[0:-1:2] * (1 + 1e-9)
    with pytest.raises(InvalidInputError, match=f"holds {str(dtype).removeprefix('torch.')} weights"):
        from_pykeen(model)
    if dtype == torch.float64:
        res = kgeval.evaluate(model, ds.testing.mapped_triples, filter_triples=_filters(ds), progress=False)
        ours, theirs = _kgeval_ranks(res.rank_table), _pykeen_ranks(model, ds)
        for key in theirs:
            assert np.array_equal(ours[key], theirs[key]), key
        assert (res.rank_table.pessimistic == res.rank_table.optimistic).all()  # 1e-9 apart: no float64 tie


def test_readme_infinite_scores_count_as_candidates(datasets):
    """README, 'Where kgeval deliberately differs': PyKEEN counts finite scores as candidates but ranks
    against all of them (rank 12 of 11, AMRI -1.2); kgeval counts every candidate (12 of 12, AMRI -1.0)."""
    ds = datasets[False]
    model = _cooccurrence_filtered(ds)
    with torch.no_grad():
        rows = model.predict_t(ds.testing.mapped_triples[:, :2])
    i, t = (int(x) for x in torch.isinf(rows).nonzero()[0])
    triple = torch.tensor([[int(ds.testing.mapped_triples[i, 0]), int(ds.testing.mapped_triples[i, 1]), t]])
    ev = RankBasedEvaluator(clear_on_finalize=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = ev.evaluate(model, triple, additional_filter_triples=[ds.training.mapped_triples], use_tqdm=False,
                             targets=["tail"])
    ours = kgeval.evaluate(model, triple, filter_triples=[ds.training.mapped_triples], sides="tail", progress=False)
    rank = int(ev.ranks["tail", "pessimistic"][0][0])
    assert int(ours.rank_table.pessimistic[0]) == rank
    assert int(ev.num_candidates["tail"][0][0]) < rank <= int(ours.rank_table.num_candidates[0])
    known = {int(x) for x in ds.training.mapped_triples[(ds.training.mapped_triples[:, 0] == triple[0, 0])
                                                       & (ds.training.mapped_triples[:, 1] == triple[0, 1]), 2]}
    assert int(ours.rank_table.num_candidates[0]) == ds.num_entities - len(known - {t})
    assert theirs.get_metric("tail.realistic.adjusted_arithmetic_mean_rank_index") < -1
    assert ours.get_metric("tail.realistic.adjusted_arithmetic_mean_rank_index") >= -1
