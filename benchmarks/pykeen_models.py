"""One PyKEEN model evaluated by PyKEEN and by kgeval (same model, same machine, same ranks).

    python benchmarks/pykeen_models.py                          # DistMult dim 200 on FB15k-237
    python benchmarks/pykeen_models.py --model TransE --dim 50 --dataset nations

The model is a PyKEEN 1.11.1 model built on the dataset's training triples (``random_seed=0``,
untrained: evaluation cost does not depend on training), optionally with inverse triples.
Filtered, both sides, train + valid + test as known triples. Rows:

- ``pykeen``: ``RankBasedEvaluator().evaluate(model, test, additional_filter_triples=[train, valid])``
  with PyKEEN's automatic batch size (CPU: 32);
- ``kgeval (PyKEEN model)``: ``kgeval.evaluate(model, ...)`` through the adapter (PyKEEN's
  ``predict_t`` / ``predict_h``; scoring cost is PyKEEN's own, batches sized from its measured
  working memory);
- ``kgeval (from_pykeen)``: the same weights converted to kgeval's model (matmul scoring).

Each row runs in a fresh subprocess: ``s`` is the evaluation's wall time, ``peak RSS MiB`` the
process's max RSS (data and model included), ``MRR`` the both-realistic MRR (equal across rows).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
ROWS = ("pykeen", "kgeval (PyKEEN model)", "kgeval (from_pykeen)")


def build(args):
    import torch
    from pykeen.models import model_resolver
    from pykeen.triples import CoreTriplesFactory

    from kgeval.data import get_dataset

    ds = get_dataset(args.dataset, data_dir=args.data_dir)
    factories = {name: CoreTriplesFactory.create(torch.as_tensor(getattr(ds, name)), num_entities=ds.num_entities,
                                                 num_relations=ds.num_relations,
                                                 create_inverse_triples=args.inverse and name == "training")
                 for name in ("training", "validation", "testing")}
    model = model_resolver.make(args.model, triples_factory=factories["training"], embedding_dim=args.dim,
                                random_seed=0)
    return model.eval(), factories


def run_one(row: str, args) -> dict:
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    import kgeval

    model, f = build(args)
    start = time.perf_counter()
    if row == "pykeen":
        from pykeen.evaluation import RankBasedEvaluator

        res = RankBasedEvaluator().evaluate(model, f["testing"].mapped_triples, use_tqdm=False,
                                            additional_filter_triples=[f["training"].mapped_triples,
                                                                       f["validation"].mapped_triples])
        mrr = float(res.get_metric("both.realistic.inverse_harmonic_mean_rank"))
    else:
        scorer = model
        if row == "kgeval (from_pykeen)":
            from kgeval.interop import from_pykeen

            scorer = from_pykeen(model)
        res = kgeval.evaluate(scorer, f["testing"].mapped_triples, progress=False,
                              filter_triples=[f["training"].mapped_triples, f["validation"].mapped_triples])
        mrr = float(res.get_metric("both.realistic.inverse_harmonic_mean_rank"))
    seconds = time.perf_counter() - start
    return {"row": row, "s": seconds, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "mrr": mrr}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="fb15k237")
    p.add_argument("--data-dir", default=str(DATASETS))
    p.add_argument("--model", default="DistMult")
    p.add_argument("--dim", type=int, default=200)
    p.add_argument("--inverse", action="store_true", help="build the model with inverse triples")
    p.add_argument("--rows", nargs="*", default=list(ROWS), choices=ROWS)
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args)))
        return
    print(f"{args.model} dim {args.dim} on {args.dataset} (inverse triples: {args.inverse}); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    print(f"{'':24} {'s':>9} {'peak RSS MiB':>13} {'MRR':>9}")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for row in args.rows:
        out = subprocess.run([sys.executable, __file__, *_forward(args), "--one", row], env=env, check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
        r = json.loads(out)
        print(f"{row:24} {r['s']:9.2f} {r['rss_mib']:13.0f} {r['mrr']:9.5f}", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


def _forward(args) -> list[str]:
    out = ["--dataset", args.dataset, "--data-dir", args.data_dir, "--model", args.model, "--dim", str(args.dim)]
    return out + (["--inverse"] if args.inverse else [])


if __name__ == "__main__":
    main()
