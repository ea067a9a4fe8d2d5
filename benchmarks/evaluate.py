"""Benchmark of the filtered evaluator against the bare matmul floor.

    python benchmarks/evaluate.py                     # FB15k-237 and WN18RR
    python benchmarks/evaluate.py --scaling           # 1e5 and 1e6 random entities
    python benchmarks/evaluate.py --datasets FB15k-237 --pykeen-python /tmp/pk/bin/python
    python benchmarks/evaluate.py --old-src /path/to/old/checkout/src   # old and new side by side

Model: DistMult with random float32 embeddings, dim 200 (dim 64 for the scaling runs), as a plain
scorer (:class:`PlainDistMult` below: what a user writes, ``score_tails(h, r, entities=None)``) and
as a built-in model; filtered with train + valid; both sides. Before timing, the counting kernel is
loaded (``warm_kernel``), as a loop of evaluations would have it.

``--old-src PATH`` runs every configuration a second time in a subprocess whose ``PYTHONPATH`` is
``PATH`` (an older checkout's ``src``), the same workload and embeddings, one row each ("new", "old"),
each with its own matmul floor measured in the same process.

Columns:
- ``kgeval s``: wall time (best of 2) of ``evaluate_ranks`` of the plain scorer with default settings
  (ranks plus the consistency check; query metrics are off by default); ``ranks-only s``: without the
  consistency check; ``model s``: ranks only, the same embeddings as a built-in ``DistMult`` model
  (``kgeval.models.from_embeddings``, what ``pipeline`` users evaluate: queries prepared once per
  batch); its rank table is checked to be the plain scorer's;
- ``floor s``: the bare ``torch.matmul`` of ``(h * r)`` query rows with the entity matrix over
  the same batches (one row per unique query and side, as kgeval scores them), best of 2;
  ``ratio`` = kgeval / floor;
- ``peak RSS MiB``: ``resource.getrusage`` max RSS of a fresh subprocess per configuration
  (data, embeddings, index and evaluation included), up to the end of the reference scorer's runs and the floor
  (the model's run afterwards holds its own copy of the embeddings: ``from_embeddings`` copies a tensor).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
# the benchmark datasets (FB15k-237, WN18RR) are not shipped with the package: pass their parent
# directory with --data-dir (default: ../shared/datasets next to the repository)
DATASETS = REPO.parent / "shared" / "datasets"


def load_dataset(name: str):
    """``({split: id triples}, #entities, #relations)`` through kgeval's own loader (R14)."""
    from kgeval.data import get_dataset

    ds = get_dataset(name, data_dir=DATASETS)
    arr = {s: np.asarray(getattr(ds, attr), dtype=np.int64)
           for s, attr in (("train", "training"), ("valid", "validation"), ("test", "testing"))}
    return arr, ds.num_entities, ds.num_relations


def set_data_dir(path: str) -> None:
    global DATASETS
    DATASETS = Path(path)


def synthetic(num_entities: int, num_relations: int = 100, num_test: int = 5000, num_train: int = 1_000_000, seed=0):
    rng = np.random.default_rng(seed)
    hi = [num_entities, num_relations, num_entities]
    return {"train": rng.integers(0, hi, size=(num_train, 3)), "valid": np.zeros((0, 3), np.int64),
            "test": rng.integers(0, hi, size=(num_test, 3))}, num_entities, num_relations


def matmul_floor(scorer, test, batch_size, num_relations) -> float:
    """Bare matmul time over the batches kgeval scores (unique queries per side)."""
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        with torch.inference_mode():
            for side_ent in (0, 2):
                keys = np.unique(test[:, side_ent] * num_relations + test[:, 1])
                ent = torch.as_tensor(keys // num_relations)
                rel = torch.as_tensor(keys % num_relations)
                for a in range(0, keys.shape[0], batch_size):
                    q = scorer.entity[ent[a : a + batch_size]] * scorer.relation[rel[a : a + batch_size]]
                    torch.matmul(q, scorer.entity.T)
        best = min(best, time.perf_counter() - t0)
    return best


class PlainDistMult:
    """DistMult as a user would write it against the scorer protocol (no optional capabilities but
    ``entities=``): ``score(h, r, t) = sum(e_h * w_r * e_t)``."""

    def __init__(self, entity: torch.Tensor, relation: torch.Tensor):
        self.entity, self.relation = entity, relation
        self.num_entities, self.num_relations = entity.shape[0], relation.shape[0]

    def _cands(self, entities):
        return self.entity if entities is None else self.entity[entities]

    def score_tails(self, h, r, entities=None):
        return (self.entity[h] * self.relation[r]) @ self._cands(entities).T

    def score_heads(self, r, t, entities=None):
        return (self.entity[t] * self.relation[r]) @ self._cands(entities).T


def _warm_kernel() -> None:
    """Load the compiled counting kernel before timing (an older checkout has no ``warm_kernel``)."""
    try:
        from kgeval.evaluation import warm_kernel
    except ImportError:  # the old checkout kept the kernel in count_kernel.py
        from kgeval.evaluation.count_kernel import _load as warm_kernel
    warm_kernel()


def run_single(args) -> dict:
    import kgeval
    from kgeval.evaluation import evaluate_ranks
    try:  # an older checkout (--old-src) kept them in batching.py
        from kgeval.evaluation.batches import auto_batch
        from kgeval.evaluation.inputs import default_memory_budget
    except ImportError:
        from kgeval.evaluation.batching import auto_batch, default_memory_budget
    from kgeval.models import from_embeddings

    if args.single.startswith("synthetic:"):
        data, ne, nr = synthetic(int(float(args.single.split(":")[1])))
        dim = 64
    else:
        data, ne, nr = load_dataset(args.single)
        dim = args.dim
    gen = torch.Generator().manual_seed(0)
    scorer = PlainDistMult(torch.randn(ne, dim, generator=gen), torch.randn(nr, dim, generator=gen))
    _warm_kernel()
    test = data["test"]
    filt = [data["train"], data["valid"]]
    t_default = t_ranks = float("inf")
    for _ in range(2):  # best of 2: the first run pays allocator warm-up, shared machines are noisy
        t0 = time.perf_counter()
        out = evaluate_ranks(scorer, test, filter_triples=filt, progress=False)
        t_default = min(t_default, time.perf_counter() - t0)
        t0 = time.perf_counter()
        evaluate_ranks(scorer, test, filter_triples=filt, progress=False, query_metrics_k=(), check_consistency=False)
        t_ranks = min(t_ranks, time.perf_counter() - t0)
    bs = auto_batch(default_memory_budget(), ne, len(test))
    floor = matmul_floor(scorer, test, bs, nr)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the model's run (below)
    # the same embeddings as a built-in model (what pipeline users evaluate): its queries are prepared
    # once per batch; same ranks
    model = from_embeddings("distmult", scorer.entity, scorer.relation)
    t_model = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        got = evaluate_ranks(model, test, filter_triples=filt, progress=False, query_metrics_k=(),
                             check_consistency=False)
        t_model = min(t_model, time.perf_counter() - t0)
    same = all(np.array_equal(getattr(got.rank_table, a), getattr(out.rank_table, a))
               for a in ("triple_index", "side", "optimistic", "pessimistic", "num_candidates"))
    tab = out.rank_table
    return {
        "name": args.single,
        "src": str(Path(kgeval.__file__).resolve().parents[1]),
        "entities": ne,
        "test": len(test),
        "dim": dim,
        "batch": bs,
        "kgeval_s": t_default,
        "ranks_only_s": t_ranks,
        "model_s": t_model,
        "model_same_ranks": same,
        "floor_s": floor,
        "peak_rss_mib": rss,
        "mrr": float(np.mean(2.0 / (tab.optimistic + tab.pessimistic))),
    }


PYKEEN_SCRIPT = r"""
import json, sys, time, resource, numpy as np, torch
from pykeen.models import DistMult
from pykeen.triples import CoreTriplesFactory
from pykeen.evaluation import RankBasedEvaluator
d = np.load(sys.argv[1])
ne, nr = d["ent"].shape[0], d["rel"].shape[0]
tf = CoreTriplesFactory.create(mapped_triples=torch.as_tensor(d["train"]), num_entities=ne, num_relations=nr)
model = DistMult(triples_factory=tf, embedding_dim=d["ent"].shape[1])
with torch.no_grad():
    model.entity_representations[0]._embeddings.weight.copy_(torch.as_tensor(d["ent"]))
    model.relation_representations[0]._embeddings.weight.copy_(torch.as_tensor(d["rel"]))
ev = RankBasedEvaluator(filtered=True)
t0 = time.perf_counter()
res = ev.evaluate(model, torch.as_tensor(d["test"]), additional_filter_triples=[torch.as_tensor(d["train"]), torch.as_tensor(d["valid"])], use_tqdm=False)
t = time.perf_counter() - t0
print(json.dumps({"pykeen_s": t, "pykeen_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "pykeen_mrr": float(res.get_metric("both.realistic.inverse_harmonic_mean_rank"))}))
"""


def run_pykeen(python: str, name: str, dim: int) -> dict:
    """Same embeddings in PyKEEN 1.11.1 (untested here: no PyKEEN venv was available)."""
    import tempfile

    data, ne, nr = load_dataset(name)
    gen = torch.Generator().manual_seed(0)
    ent, rel = torch.randn(ne, dim, generator=gen), torch.randn(nr, dim, generator=gen)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.npz"
        np.savez(path, ent=ent.numpy(), rel=rel.numpy(), **data)
        script = Path(tmp) / "pk.py"
        script.write_text(PYKEEN_SCRIPT)
        proc = subprocess.run([python, str(script), str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"pykeen_error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="*", default=["FB15k-237", "WN18RR"])
    p.add_argument("--scaling", action="store_true", help="1e5 and 1e6 random entities, 5,000 test triples, dim 64")
    p.add_argument("--dim", type=int, default=200)
    p.add_argument("--pykeen-python", default=None, help="python of a venv with pykeen 1.11.1 installed")
    p.add_argument("--data-dir", default=str(DATASETS), help="directory holding the dataset folders")
    p.add_argument("--old-src", default=None,
                   help="an older checkout's src directory: every configuration also runs with it, side by side")
    p.add_argument("--single", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    set_data_dir(args.data_dir)
    if args.single:
        print(json.dumps(run_single(args)))
        return
    configs = ["synthetic:1e5", "synthetic:1e6"] if args.scaling else list(args.datasets)
    rows = []
    sources = [("new", str(REPO / "src"))] + ([("old", args.old_src)] if args.old_src else [])
    for name in configs:
        for label, src in sources:
            cmd = [sys.executable, __file__, "--single", name, "--dim", str(args.dim), "--data-dir", args.data_dir]
            env = {**os.environ, "PYTHONPATH": src}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                raise SystemExit(f"{name} ({label}): benchmark failed")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["name"] = f"{name} {label}" if args.old_src else name
            if args.pykeen_python and label == "new" and not name.startswith("synthetic"):
                row.update(run_pykeen(args.pykeen_python, name, args.dim))
            rows.append(row)
    header = (f"{'config':<20}{'entities':>10}{'test':>7}{'dim':>5}{'batch':>7}{'kgeval s':>10}{'ranks-only s':>14}"
              f"{'model s':>9}{'floor s':>9}{'ratio':>7}{'ratio(ranks)':>14}{'ratio(model)':>14}{'peak RSS MiB':>14}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(header)
    for r in rows:
        print(
            f"{r['name']:<20}{r['entities']:>10}{r['test']:>7}{r['dim']:>5}{r['batch']:>7}{r['kgeval_s']:>10.2f}"
            f"{r['ranks_only_s']:>14.2f}{r['model_s']:>9.2f}{r['floor_s']:>9.2f}{r['kgeval_s'] / r['floor_s']:>7.2f}"
            f"{r['ranks_only_s'] / r['floor_s']:>14.2f}{r['model_s'] / r['floor_s']:>14.2f}{r['peak_rss_mib']:>14.0f}"
            + ("" if r["model_same_ranks"] else "   MODEL RANKS DIFFER")
        )
        if "pykeen_s" in r:
            print(f"{'  pykeen 1.11.1':<20}{'':>10}{'':>7}{'':>5}{'':>7}{r['pykeen_s']:>10.2f}{'':>14}{'':>9}"
                  f"{r['pykeen_s'] / r['floor_s']:>7.2f}{'':>14}{r['pykeen_rss_mib']:>14.0f}"
                  f"   MRR kgeval {r['mrr']:.6f} pykeen {r['pykeen_mrr']:.6f}")
        elif "pykeen_error" in r:
            print(f"  pykeen: {r['pykeen_error']}")


if __name__ == "__main__":
    main()
