"""Benchmark: train kgeval models on small datasets and compare test MRR to reference targets.

Usage::

    python benchmarks/train.py                       # all configured (model, dataset) pairs
    python benchmarks/train.py --models tucker --datasets nations
    python benchmarks/train.py --evaluator exact     # built-in exact evaluator (no kgeval.evaluate)

Metric: test MRR, both sides, realistic ranks (ties count half), filtered with
train + valid + test -- the setting of the reference case study. Targets are the values
that case study reports; a row passes when our MRR >= target. Hyper-parameters are fixed
(no early stopping, no test peeking during training); they were chosen by a short manual
search on validation MRR and are documented next to each entry of ``CONFIGS``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from kgeval.models import get_model
from kgeval.training import train


# Reference test MRRs (both, realistic, filtered) of the case study.
TARGETS = {
    ("complex", "nations"): 0.430, ("rotate", "nations"): 0.512,
    ("transe", "nations"): 0.403, ("tucker", "nations"): 0.756,
    ("complex", "kinships"): 0.662, ("rotate", "kinships"): 0.769,
    ("transe", "kinships"): 0.439, ("tucker", "kinships"): 0.864,
}

# One configuration per (model, dataset): "model" -> get_model keywords, "train" -> train keywords.
# Chosen by a short manual search (2-6 settings per row, one seed) looking at validation MRR;
# test MRR was visible during that search too, so treat margins of a few points as noise.


def _lcwa(dim, epochs=100, lr=5e-3, batch_size=128, loss="softmax", label_smoothing=0.0, regularizer=None,
          weight=0.0, **model):
    """LCWA + inverse relations + Adam: 1-to-all scoring of every (h, r, ?) and (t, r^-1, ?) query."""
    return {"model": {"dim": dim, "inverse_relations": True, **model},
            "train": {"loop": "lcwa", "loss": loss, "optimizer": "adam", "lr": lr, "epochs": epochs,
                      "batch_size": batch_size, "label_smoothing": label_smoothing,
                      "regularizer": regularizer, "regularizer_weight": weight}}


def _slcwa(dim, epochs=100, lr=5e-3, negatives=64, margin=6.0, temperature=1.0, batch_size=512, **model):
    """sLCWA + self-adversarial negative sampling loss (RotatE paper) + Adam."""
    return {"model": {"dim": dim, **model},
            "train": {"loop": "slcwa", "loss": "nssa", "loss_kwargs": {"margin": margin, "temperature": temperature},
                      "optimizer": "adam", "lr": lr, "epochs": epochs, "batch_size": batch_size,
                      "num_negatives": negatives}}


# ComplEx: softmax cross-entropy + N3 (Lacroix et al., 2018) beat BCE + label smoothing clearly
# (Nations valid 0.765 vs 0.491).
_COMPLEX = _lcwa(200, lr=1e-2, regularizer="n3", weight=1e-2)
# DistMult: same recipe as ComplEx (not tuned, no target).
_DISTMULT = _lcwa(200, lr=1e-2, regularizer="n3", weight=1e-2)
# TuckER: a small relation core (relation_dim=32) keeps the (batch, dim, dim) core slices cheap;
# softmax + label smoothing 0.1 was best among dim 64-200, lr 3e-3-1e-2, BCE vs softmax (Nations).
_TUCKER = _lcwa(100, relation_dim=32, label_smoothing=0.1)
# RotatE / TransE on Nations: LCWA with softmax beat self-adversarial sLCWA on validation
# (RotatE 0.685 vs 0.663, TransE 0.534 vs 0.413).
_ROTATE_LCWA = _lcwa(100)
_TRANSE_LCWA = _lcwa(100)
# TransE on Kinships/UMLS: L2 TransE collapses there (sLCWA/nssa valid 0.04-0.08, LCWA 0.15);
# L1 distance without the unit-norm constraint + LCWA softmax works best of ~10 settings tried
# (dim 400: valid 0.445; dim 200: 0.428; vs 0.26-0.34 for self-adversarial / margin-ranking sLCWA with
# L1). A light L2 penalty gave the best validation MRR (0.451); all dim-400 variants land at
# test 0.43-0.44, i.e. right at the 0.439 target: this row passes or fails by seed-level noise.
_TRANSE_L1 = _lcwa(400, epochs=200, batch_size=256, p=1, normalize_entities=False, regularizer="l2", weight=1e-4)
# PairRE: untuned, no target.
_PAIRRE = _slcwa(100, margin=6.0)

CONFIGS: dict[tuple[str, str], dict] = {
    ("complex", "nations"): _COMPLEX,
    ("distmult", "nations"): _DISTMULT,
    ("tucker", "nations"): _TUCKER,
    ("rotate", "nations"): _ROTATE_LCWA,
    ("transe", "nations"): _TRANSE_LCWA,
    ("pairre", "nations"): _PAIRRE,
    ("complex", "kinships"): _COMPLEX,  # valid 0.862 (dim 100, weight 5e-3: 0.828)
    ("distmult", "kinships"): _DISTMULT,
    ("tucker", "kinships"): _TUCKER,
    # Kinships: self-adversarial sLCWA beat LCWA for RotatE (valid 0.826 vs 0.808)
    ("rotate", "kinships"): _slcwa(200, margin=6.0),
    ("transe", "kinships"): _TRANSE_L1,
    ("pairre", "kinships"): _PAIRRE,
    ("complex", "umls"): _COMPLEX,
    ("distmult", "umls"): _DISTMULT,
    ("tucker", "umls"): _TUCKER,
    ("rotate", "umls"): _slcwa(200, margin=6.0),
    ("transe", "umls"): _TRANSE_L1,
    ("pairre", "umls"): _PAIRRE,
}


# ---------------------------------------------------------------------------- data
def load_dataset(name: str):
    """(train, valid, test, num_entities, num_relations) through kgeval's own loader (R14)."""
    from kgeval.data import get_dataset

    ds = get_dataset(name)
    return ds.training, ds.validation, ds.testing, ds.num_entities, ds.num_relations


# ---------------------------------------------------------------------------- evaluation
@torch.no_grad()
def exact_evaluate(model, triples, filter_triples, num_entities):
    """(MRR, hits@10): both sides, realistic rank = 1 + #better + #ties / 2, filtered."""
    model.eval()
    known = {}
    for h, r, t in np.concatenate(filter_triples):
        known.setdefault(("t", h, r), set()).add(t)
        known.setdefault(("h", r, t), set()).add(h)
    h = torch.as_tensor(triples[:, 0])
    r = torch.as_tensor(triples[:, 1])
    t = torch.as_tensor(triples[:, 2])
    ranks = []
    for side, scores, true in (("t", model.score_tails(h, r), t), ("h", model.score_heads(r, t), h)):
        for i in range(len(triples)):
            row = scores[i].clone()
            key = ("t", int(h[i]), int(r[i])) if side == "t" else ("h", int(r[i]), int(t[i]))
            s_true = row[true[i]].item()
            others = [e for e in known[key] if e != int(true[i])]
            mask = torch.ones(num_entities, dtype=torch.bool)
            mask[others] = False
            mask[true[i]] = False
            cand = row[mask]
            ranks.append(1 + (cand > s_true).sum().item() + 0.5 * (cand == s_true).sum().item())
    ranks = np.asarray(ranks)
    return float(np.mean(1.0 / ranks)), float(np.mean(ranks <= 10))


def kgeval_evaluate(model, triples, filter_triples, num_entities):
    import kgeval

    model.eval()
    with torch.no_grad():
        res = kgeval.evaluate(model, triples, filter_triples=filter_triples, progress=False)
    return res.get_metric("both.realistic.inverse_harmonic_mean_rank"), res.get_metric("both.realistic.hits_at_10")


def run(model_name, dataset, evaluator, seed=0, split="test", overrides=None):
    tr, va, te, n_e, n_r = load_dataset(dataset)
    cfg = CONFIGS[(model_name, dataset)]
    model_kw, train_kw = dict(cfg["model"]), dict(cfg["train"])
    for k, v in (overrides or {}).items():
        (model_kw if k in ("dim", "p", "normalize_entities", "input_dropout", "hidden_dropout1", "hidden_dropout2",
                           "relation_dim", "inverse_relations") else train_kw)[k] = v
    model = get_model(model_name, n_e, n_r, seed=seed, **model_kw)
    result = train(model, tr, seed=seed, progress=False, **train_kw)
    eval_triples = te if split == "test" else va
    mrr, hits = evaluator(model, eval_triples, [tr, va, te], n_e)
    return result, mrr, hits


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["complex", "rotate", "transe", "tucker"])
    parser.add_argument("--datasets", nargs="*", default=["nations", "kinships", "umls"])
    parser.add_argument("--evaluator", choices=["auto", "exact", "kgeval"], default="auto")
    parser.add_argument("--split", choices=["test", "valid"], default="test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's choice); on a shared 2-core machine 1 thread "
                             "is often faster because busy-waiting OpenMP threads collide with other jobs")
    parser.add_argument("--set", nargs="*", default=[], help="overrides key=value (python literals)")
    args = parser.parse_args(argv)
    import ast

    overrides = {k: ast.literal_eval(v) for k, v in (s.split("=", 1) for s in args.set)}
    if args.threads:
        torch.set_num_threads(args.threads)
    evaluator = exact_evaluate
    if args.evaluator != "exact":
        evaluator = kgeval_evaluate
    print(f"evaluator: {evaluator.__name__}, split: {args.split}, torch threads: {torch.get_num_threads()}")
    header = f"{'model':<9} {'dataset':<9} {'epochs':>6} {'seconds':>8} {'s/epoch':>8} {'MRR':>6} {'H@10':>6} {'target':>6}  result"
    print(header)
    print("-" * len(header))
    failed = 0
    for ds in args.datasets:
        for m in args.models:
            if (m, ds) not in CONFIGS:
                continue
            result, mrr, hits = run(m, ds, evaluator, args.seed, args.split, overrides)
            target = TARGETS.get((m, ds))
            verdict = "-" if target is None else ("pass" if mrr >= target else "FAIL")
            failed += verdict == "FAIL"
            print(f"{m:<9} {ds:<9} {result.epochs_run:>6} {result.seconds:>8.1f} {result.seconds_per_epoch:>8.3f} "
                  f"{mrr:>6.3f} {hits:>6.3f} {'' if target is None else f'{target:.3f}':>6}  {verdict}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
