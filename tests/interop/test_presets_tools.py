"""Protocol presets against the real tools: PyKEEN 1.11.1, TorchKGE 0.17.7 and OGB's Evaluator run on the
same float32 scores as kgeval's preset and must give identical ranks per task (and the same headline
numbers); LibKGE, which does not install next to torch 2.13, through a port of its ranking function
(``presets_support.libkge_ranks``, file and commit cited there).

Scorers (:func:`presets_support.score_table`): DistMult scores, a 0.5 grid with many exact ties, near ties
inside LibKGE's isclose tolerance, NaN and +-inf candidates; unseen entities for PyKEEN's drop rule. The
documented divergences (a NaN true score; LibKGE's filtered answers tying with a -inf true score) are
asserted as such, so a change in either tool or in kgeval shows up here.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import kgeval
from kgeval.data import get_dataset
from presets_support import KINDS, libkge_ranks, score_table, scorer_of


@pytest.fixture(scope="module")
def nations():
    return get_dataset("nations")


def _table(ds, kind, protect=True):
    triples = np.concatenate([ds.training, ds.validation, ds.testing]) if protect else None
    return score_table(kind, ds.num_entities, ds.num_relations, protect=triples)


def _kgeval(ds, table, protocol, **kw):
    return kgeval.evaluate(scorer_of(table), ds.testing, filter_triples={"train": ds.training, "valid": ds.validation},
                           protocol=protocol, progress=False, **kw)


def _by_side(results, rank_type):
    t = results.rank_table
    out = {}
    for side in (0, 1):
        sel = t.side == side
        order = np.argsort(t.triple_index[sel])
        out[side] = t.subset(sel).ranks(rank_type)[order]
    return out


# ------------------------------------------------------------------------------------------------ PyKEEN
def _pykeen_model(table):
    from pykeen.models.mocks import FixedModel
    from pykeen.triples import CoreTriplesFactory

    class TableModel(FixedModel):
        def _generate_fake_scores(self, h, r, t):
            return table[h, r, t]

    info = CoreTriplesFactory.create(torch.zeros((1, 3), dtype=torch.long), num_entities=table.shape[0],
                                     num_relations=table.shape[1])
    return TableModel(triples_factory=info)


class _Recording:
    """A PyKEEN RankBasedEvaluator that keeps its per-task ranks (finalize clears them)."""

    @staticmethod
    def make():
        from pykeen.evaluation import RankBasedEvaluator

        class Recorder(RankBasedEvaluator):
            def finalize(self):
                self.kept = {k: np.concatenate(v) for k, v in self.ranks.items()}
                return super().finalize()

        return Recorder(filtered=True)


def _pykeen_evaluate(model, test, filters):
    ev = _Recording.make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = ev.evaluate(model, torch.as_tensor(test), additional_filter_triples=[torch.as_tensor(f) for f in filters],
                             batch_size=len(test), use_tqdm=False)
    return ev, result


@pytest.mark.parametrize("kind", KINDS)
def test_pykeen_preset_gives_pykeens_ranks_and_numbers(nations, kind):
    pytest.importorskip("pykeen")
    table = _table(nations, kind)
    ev, pk = _pykeen_evaluate(_pykeen_model(table), nations.testing, [nations.training, nations.validation])
    ours = _kgeval(nations, table, "pykeen")
    mine = {rt: _by_side(ours, rt) for rt in ("optimistic", "pessimistic", "realistic")}
    for side, target in ((0, "head"), (1, "tail")):
        for rt in ("optimistic", "pessimistic", "realistic"):
            np.testing.assert_array_equal(ev.kept[(target, rt)], mine[rt][side], err_msg=f"{kind} {target} {rt}")
    for key in ("inverse_harmonic_mean_rank", "hits_at_1", "hits_at_10", "arithmetic_mean_rank"):
        # the ranks are identical (above); PyKEEN averages float32 ranks: the same numbers to float32 precision
        assert ours[key.replace("inverse_harmonic_mean_rank", "mrr")] == pytest.approx(
            pk.get_metric(f"both.realistic.{key}"), rel=1e-6)
        assert ours[f"tail.pessimistic.{key}"] == pytest.approx(pk.get_metric(f"tail.pessimistic.{key}"), rel=1e-6)


def test_pykeen_preset_drops_unseen_triples_and_their_entities(nations):
    """PyKEEN maps the test split with the training vocabulary: triples with an unseen entity are dropped and
    the entity is no candidate (its model has none); the preset does both, kgeval's default neither."""
    pytest.importorskip("pykeen")
    from pykeen.triples import TriplesFactory

    ne = nations.num_entities
    test = nations.testing.copy()
    test[::7, 2] = ne  # one new entity, unseen in training, as the tail of every 7th test triple
    table = score_table("ties", ne + 1, nations.num_relations)
    label = np.vectorize(lambda i: f"e{i:02d}")
    rlabel = np.vectorize(lambda i: f"r{i:02d}")

    def labelled(tr):
        return np.stack([label(tr[:, 0]), rlabel(tr[:, 1]), label(tr[:, 2])], axis=1)

    train_tf = TriplesFactory.from_labeled_triples(labelled(nations.training))
    assert train_tf.entity_to_id == {f"e{i:02d}": i for i in range(ne)}  # ids as kgeval's: one table serves both
    assert train_tf.relation_to_id == {f"r{i:02d}": i for i in range(nations.num_relations)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        test_tf = TriplesFactory.from_labeled_triples(labelled(test), entity_to_id=train_tf.entity_to_id,
                                                      relation_to_id=train_tf.relation_to_id)
    kept = test[test[:, 2] < ne]
    assert test_tf.num_triples == len(kept)
    ev, pk = _pykeen_evaluate(_pykeen_model(table[:ne, :, :ne]), test_tf.mapped_triples.numpy(),
                              [nations.training, nations.validation])
    ours = kgeval.evaluate(scorer_of(table), test, filter_triples={"train": nations.training,
                                                                   "valid": nations.validation},
                           protocol="pykeen", progress=False)
    assert ours.protocol["unseen"]["policy"] == "dropped" and ours.protocol["unseen"]["triples"] == len(test) - len(kept)
    kept_ranks = np.concatenate([ev.kept[("head", "realistic")], ev.kept[("tail", "realistic")]])
    np.testing.assert_array_equal(np.sort(kept_ranks), np.sort(ours.rank_table.ranks("realistic")))
    assert ours["mrr"] == pytest.approx(pk.get_metric("both.realistic.inverse_harmonic_mean_rank"), rel=1e-6)
    assert ours["hits@10"] == pytest.approx(pk.get_metric("both.realistic.hits_at_10"), rel=1e-6)
    default = kgeval.evaluate(scorer_of(table), test, filter_triples={"train": nations.training,
                                                                      "valid": nations.validation}, progress=False)
    assert len(default.rank_table) == 2 * len(test)  # kgeval keeps them by default (and says so)


# ---------------------------------------------------------------------------------------------- TorchKGE
def _torchkge_evaluator(table, ds):
    from torchkge.data_structures import KnowledgeGraph
    from torchkge.evaluation import LinkPredictionEvaluator

    class TableModel(torch.nn.Module):
        """TorchKGE's inference interface over the table: 'embeddings' are the ids themselves."""

        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(1))

        def inference_prepare_candidates(self, h_idx, t_idx, r_idx, entities=True):
            cand = torch.arange(table.shape[0]).expand(h_idx.shape[0], -1)
            return h_idx, t_idx, r_idx, cand

        def inference_scoring_function(self, h, t, r):
            if t.dim() == 2:  # tails as candidates
                return table[h[:, None], r[:, None], t]
            return table[h, r[:, None], t[:, None]]

    full = np.concatenate([ds.training, ds.validation, ds.testing])
    kg = KnowledgeGraph(kg={"heads": torch.as_tensor(full[:, 0]), "tails": torch.as_tensor(full[:, 2]),
                            "relations": torch.as_tensor(full[:, 1])},
                        ent2ix={i: i for i in range(ds.num_entities)}, rel2ix={i: i for i in range(ds.num_relations)})
    _, _, kg_test = kg.split_kg(sizes=(len(ds.training), len(ds.validation), len(ds.testing)))
    assert torch.equal(kg_test.head_idx, torch.as_tensor(ds.testing[:, 0]))  # split_kg keeps the order
    ev = LinkPredictionEvaluator(TableModel(), kg_test)
    ev.evaluate(b_size=64, verbose=False)
    return ev


@pytest.mark.parametrize("kind", KINDS)
def test_torchkge_preset_gives_torchkges_ranks_and_numbers(nations, kind):
    pytest.importorskip("torchkge")
    table = _table(nations, kind)
    ev = _torchkge_evaluator(table, nations)
    ours = _kgeval(nations, table, "torchkge")
    mine = _by_side(ours, "pessimistic")
    np.testing.assert_array_equal(ev.filt_rank_true_heads.numpy(), mine[0])
    np.testing.assert_array_equal(ev.filt_rank_true_tails.numpy(), mine[1])
    # TorchKGE averages in float32: the same numbers to float32 precision
    assert ours["mrr"] == pytest.approx(ev.mrr()[1], rel=1e-6)
    assert ours["mr"] == pytest.approx(ev.mean_rank()[1], rel=1e-6)
    assert ours["hits@10"] == pytest.approx(ev.hit_at_k(10)[1], rel=1e-6)
    assert ours.rank_type == "pessimistic"


# ---------------------------------------------------------------------------------------------------- OGB
@pytest.mark.parametrize("kind", KINDS)
def test_ogb_preset_gives_ogbs_per_triple_values(nations, kind):
    pytest.importorskip("ogb")
    from ogb.linkproppred import Evaluator

    table = _table(nations, kind)
    test = nations.testing
    rng = np.random.default_rng(1)
    negs = {}
    for key, col in (("head_neg", 0), ("tail_neg", 2)):  # 20 per triple, repeats allowed, never the answer
        draw = rng.integers(0, nations.num_entities - 1, size=(len(test), 20))
        negs[key] = draw + (draw >= test[:, col:col + 1])
    ours = kgeval.evaluate(scorer_of(table), test, candidates=negs, protocol="ogb", progress=False)
    t = torch.as_tensor(test)
    ogb = Evaluator(name="ogbl-wikikg2")
    for side, key in ((0, "head_neg"), (1, "tail_neg")):
        n = torch.as_tensor(negs[key])
        pos = table[t[:, 0], t[:, 1], t[:, 2]]
        neg = table[n, t[:, 1:2], t[:, 2:3]] if side == 0 else table[t[:, 0:1], t[:, 1:2], n]
        got = ogb.eval({"y_pred_pos": pos, "y_pred_neg": neg})
        sel = ours.rank_table.side == side
        rank = ours.rank_table.subset(sel).ranks("realistic")[np.argsort(ours.rank_table.triple_index[sel])]
        np.testing.assert_array_equal(got["mrr_list"].numpy(), (1.0 / rank).astype(np.float32))
        for k in (1, 3, 10):
            np.testing.assert_array_equal(got[f"hits@{k}_list"].numpy(), (rank <= k).astype(np.float32))
    assert ours.protocol["preset"] == "ogb" and ours.protocol["filtered"] is False


def test_ogb_preset_needs_the_given_negatives(nations):
    table = _table(nations, "distmult")
    with pytest.raises(kgeval.errors.InvalidInputError, match="candidates="):
        kgeval.evaluate(scorer_of(table), nations.testing, protocol="ogb", progress=False)


# ------------------------------------------------------------------------------------------------- LibKGE
@pytest.mark.parametrize("kind", KINDS)
def test_libkge_preset_gives_the_ports_rounded_mean_ranks(nations, kind):
    """Every task but those the preset documents (a -inf or NaN true score with other known answers, which
    LibKGE's +inf labels turn into -inf ties) has the port's rank; those differ by exactly those ties."""
    table = _table(nations, kind, protect=False)  # NaN and +-inf true scores too
    known = np.concatenate([nations.training, nations.validation, nations.testing])
    port = libkge_ranks(table, nations.testing, known)
    ours = _kgeval(nations, table, "libkge")
    t = ours.rank_table
    assert ours.rank_type == "rounded_mean"
    diverged = 0
    for side in (0, 1):
        sel = t.side == side
        order = np.argsort(t.triple_index[sel])
        part = t.subset(sel)
        opt, pes = part.optimistic[order], part.pessimistic[order]
        mine = part.ranks("rounded_mean")[order]
        ranks, ties, others = port[side]
        tri = nations.testing
        true = (table[tri[:, 0], tri[:, 1], tri[:, 2]]).numpy()
        low = np.isnan(true) | (true == -np.inf)
        odd = low & (others > 0)
        np.testing.assert_array_equal(mine[~odd], ranks[~odd], err_msg=f"{kind} side {side}")
        np.testing.assert_array_equal(ties[odd], (pes - opt + 1)[odd] + others[odd])
        diverged += int(odd.sum())
    if kind != "special":
        assert diverged == 0
    mrr = float(np.mean(1.0 / np.concatenate([port[0][0], port[1][0]])))
    if kind != "special":
        assert ours["mrr"] == pytest.approx(mrr, rel=1e-12)


def test_near_ties_are_ties_for_libkge_only(nations):
    """The near-tie scorer: LibKGE's tolerance turns score differences of 1e-6 into ties, exact comparison
    (PyKEEN, TorchKGE, kgeval's default) does not."""
    table = _table(nations, "near_ties")
    lib = _kgeval(nations, table, "libkge")
    own = _kgeval(nations, table, "kgeval")
    tl, to = lib.rank_table, own.rank_table
    assert ((tl.pessimistic - tl.optimistic).sum()) > ((to.pessimistic - to.optimistic).sum())
    assert lib["both.realistic.mrr"] != own["both.realistic.mrr"]


def test_a_nan_true_score_is_where_the_tools_disagree(nations):
    """The divergence the presets document: a NaN true score gets PyKEEN's optimistic 1 / pessimistic 0,
    TorchKGE's rank 0, OGB's rank 1; kgeval's presets rank it last (nan_policy='worst')."""
    pytest.importorskip("pykeen")
    pytest.importorskip("torchkge")
    pytest.importorskip("ogb")
    from ogb.linkproppred import Evaluator

    table = _table(nations, "distmult").clone()
    h, r, t = (int(x) for x in nations.testing[0])
    table[h, r, t] = float("nan")
    ev, _ = _pykeen_evaluate(_pykeen_model(table), nations.testing, [nations.training, nations.validation])
    assert ev.kept[("tail", "optimistic")][0] == 1 and ev.kept[("tail", "pessimistic")][0] == 0
    assert int(_torchkge_evaluator(table, nations).filt_rank_true_tails[0]) == 0
    got = Evaluator(name="ogbl-wikikg2").eval({"y_pred_pos": table[h, r, t].view(1),
                                               "y_pred_neg": table[h, r, :].view(1, -1)})
    assert float(got["mrr_list"][0]) == 1.0
    for preset in ("pykeen", "torchkge"):
        ours = _kgeval(nations, table, preset).rank_table
        row = np.flatnonzero((ours.side == 1) & (ours.triple_index == 0))[0]
        assert ours.optimistic[row] == ours.pessimistic[row] == ours.num_candidates[row]  # last
