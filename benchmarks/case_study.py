"""Seed 004's case study (§4.3, Figure 1), reproduced with kgeval's own models.

Trains ComplEx, RotatE, TransE and TuckER (the pipeline's per-model defaults,
:data:`kgeval.workflow.defaults.MODEL_DEFAULTS`) on Nations, Kinships and UMLS, and on WN18RR /
FB15k-237 when their files are present (``$KGEVAL_DATA``) and the time budget allows; evaluates
each on the test split with PyKEEN's protocol (both sides, filtered with train + valid + test),
saves every run, and writes

- ``OUT/figure1.svg``: raw MRR, its adjusted index (AMRR) and its z-score (ZMRR) per model and dataset;
- ``OUT/report.html``: the full ``kgeval report`` of all runs;
- on stdout: a table of raw, adjusted, z and p (with the bootstrap CI of the raw value where
  ``Results.confidence_interval`` exists), per model x dataset, with the training time.

Usage::

    KGEVAL_DATA=/path/to/datasets python benchmarks/case_study.py --out case-study --time-budget 600

The large datasets train for ``--large-epochs`` epochs (default 1: on 2 CPU cores a full
schedule does not fit a short budget); a dataset is skipped when the time already spent
plus its estimated cost exceeds ``--time-budget`` seconds.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

SMALL = ("nations", "kinships", "umls")
LARGE = ("wn18rr", "fb15k237")
MODELS = ("complex", "rotate", "transe", "tucker")
#: rough seconds per large-dataset run and epoch on 2 busy cores (a dataset is skipped when it would not fit)
LARGE_COST = {"wn18rr": 120.0, "fb15k237": 180.0}


def _available(name: str) -> bool:
    from kgeval.data import get_dataset
    from kgeval.errors import KGEvalError

    try:
        get_dataset(name)
    except KGEvalError:
        return False
    return True


def train_all(out: Path, datasets, models, *, large_epochs: int, time_budget: float, seed: int):
    """Train, evaluate and save every (model, dataset); returns ``[(directory, seconds)]``."""
    import kgeval

    start, done = time.perf_counter(), []
    for ds in datasets:
        large = ds in LARGE
        if large and not _available(ds):
            print(f"# {ds}: files not found, skipped")
            continue
        estimate = LARGE_COST.get(ds, 0.0) * large_epochs * len(models)
        if time.perf_counter() - start + estimate > time_budget:
            print(f"# {ds}: skipped (about {estimate:.0f} s would exceed the {time_budget:.0f} s budget)")
            continue
        for model in models:
            target = out / "runs" / f"{model}-{ds}"
            t0 = time.perf_counter()
            extra = {"epochs": large_epochs} if large else {}
            result = kgeval.pipeline(dataset=ds, model=model, random_seed=seed, progress=False, **extra)
            result.save(target, overwrite=True)
            done.append((target, time.perf_counter() - t0))
            print(f"# trained {model} on {ds} in {done[-1][1]:.1f} s", flush=True)
    return done


def table(report, seconds: dict) -> str:
    """One row per run: raw MRR [CI], AMRR, ZMRR, p (and log10 p), training seconds."""
    from kgeval.report.text import fmt, p_text

    head = (f"{'model':<8} {'dataset':<10} {'entities':>8} {'tasks':>6} {'MRR':>7} {'95% CI':>17} {'AMRR':>7} "
            f"{'ZMRR':>8} {'p':>10} {'train s':>8}")
    lines = [head, "-" * len(head)]
    runs = sorted(report.runs, key=lambda r: (r.num_entities or 0, r.model))
    for run in runs:
        row = next(r for r in run.headline if r["side"] == "both" and r["metric"] == "mrr")
        ci = "—" if row["ci_low"] is None else f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
        lines.append(f"{run.model:<8} {run.dataset:<10} {run.num_entities or 0:>8} "
                     f"{run.results.protocol.get('num_tasks', 0):>6} {row['value']:>7.3f} {ci:>17} "
                     f"{row['adjusted']:>7.3f} {row['z']:>8.2f} {p_text(row):>10} "
                     f"{seconds.get(str(run.directory), float('nan')):>8.1f}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("case-study"))
    parser.add_argument("--datasets", nargs="*", default=[*SMALL, *LARGE])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--time-budget", type=float, default=600.0, help="seconds for all training")
    parser.add_argument("--large-epochs", type=int, default=1)
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of each CI")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reuse", action="store_true", help="report on the runs already under OUT/runs")
    args = parser.parse_args(argv)

    from kgeval.report import build_report, write_report
    from kgeval.report.figures import figure_one

    t0 = time.perf_counter()
    if args.reuse:
        done = [(d, float("nan")) for d in sorted((args.out / "runs").iterdir())]
    else:
        done = train_all(args.out, args.datasets, args.models, large_epochs=args.large_epochs,
                         time_budget=args.time_budget, seed=args.seed)
    t1 = time.perf_counter()
    report = build_report([d for d, _ in done], num_resamples=args.resamples, seed=args.seed)
    (args.out / "figure1.svg").write_text(figure_one(report.runs, "mrr"), encoding="utf-8")
    write_report(report, args.out / "report.html")
    t2 = time.perf_counter()
    print(table(report, {str(d): s for d, s in done}))
    for note in report.notes:
        print(f"note: {note}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\ntraining {t1 - t0:.1f} s, report (CIs, p-values, comparison, figures) {t2 - t1:.1f} s, "
          f"peak memory {peak:.0f} MB; wrote {args.out / 'figure1.svg'} and {args.out / 'report.html'}")


if __name__ == "__main__":
    main()
