"""Is model A better than model B? :func:`compare`, a paired comparison on the same tasks.

Every row of the table compares two models on one metric (side and rank type fixed):

- ``value_a``, ``value_b``, ``difference`` = A − B; ``higher_is_better`` says which direction of
  the difference favours A (True for MRR and hits@k, False for MR and GMR);
- ``ci_low``, ``ci_high``: the percentile interval of the difference from the paired
  bootstrap (units resampled, the same units for both models), at ``confidence``; it needs
  ``num_resamples`` of at least ``2 / (1 − confidence)`` (:func:`.bootstrap.min_resamples`: 40 at
  0.95), fewer are refused whatever the test;
- ``p_value``: two-sided, of H₀ "the models are exchangeable" (no difference in either
  direction), by ``test``; ``p_method`` says how (``exact`` enumeration, ``monte carlo``,
  ``bootstrap-t``, ``bootstrap``, ``wilcoxon``, ``welch t``; a Monte Carlo p-value of ``R`` draws is
  ``(b + 1) / (R + 1)``, never below ``1 / (R + 1)``); ``p_corrected``: by ``correction``
  over all rows of the same ``level`` (see :mod:`.corrections`). ``test="bootstrap"``: the
  bootstrap-t (studentized, on the additive scale like the permutation test) for metrics that
  decompose over units, the centred percentile test (``bootstrap``) for the others (median):
  the latter ignores the uncertainty of the spread and is liberal with few units (~0.1
  rejections at α = 0.05 with 10 triples, ~0.06 with 30; benchmarks/compare.py). Both are NaN
  (``p_method`` says why) where every resample gives the observed non-zero difference (one
  unit, or the same difference in every unit): without spread they would claim 1 / (R + 1);
- ``effect_size`` (``effect_kind``): Cohen's d_z of the per-unit differences on the metric's
  additive scale (permutation, bootstrap; log rank for GMR), the rank-biserial correlation
  (Wilcoxon), Cohen's d of the per-run values (run level); NaN where undefined; signed like
  ``difference`` (positive: A's value is the larger), also where the additive scale runs the
  other way (IAMR = 1/MR, HMR = 1/MRR, IGMR);
- ``level``: ``task`` (resampling evaluation triples) or ``run`` (replicated runs: Welch's
  t-test on the per-run values of the two sets of training seeds; spreads and differences of the
  per-run values below their floating-point resolution, :data:`RUN_RESOLUTION` relative, count as
  zero: runs that agree to rounding have no spread, and two such models that agree to rounding get
  p = 1, those that differ an undefined test).

Every row of the task level is computed from the same resamples: one stream of bootstrap
resamples and one of sign patterns (both from ``seed``) serve all metrics and pairs, so the
rows' Monte Carlo errors are correlated but each row's distribution is that of its own test.

The tests are in :mod:`.paired` (on the units of :mod:`.units`), the input checks in
:mod:`.align`. The table is a pandas DataFrame when pandas is importable, else a list of dicts.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np

from .. import metrics as _metrics
from .._validation import Side, check_probability, check_seed
from ..errors import InvalidInputError, UnknownNameError, unknown_name
from . import paired
from .align import Model, align, as_model, check_protocols
from .bootstrap import check_num_resamples
from .corrections import check_correction, correct

__all__ = ["compare", "TESTS"]

TESTS = ("permutation", "bootstrap", "wilcoxon")
DEFAULT_METRICS = ("mrr", "hits@10", "mr", "gmr")
COLUMNS = ("model_a", "model_b", "metric", "level", "test", "value_a", "value_b", "difference", "higher_is_better",
           "ci_low", "ci_high", "p_value", "p_corrected", "p_method", "effect_size", "effect_kind", "num_units")


def compare(results_a, results_b, *more, metrics=DEFAULT_METRICS, side: str = "both",
            rank_type: str = "realistic", test: str = "permutation", num_resamples: int = 10_000, seed=None,
            correction: str | None = "holm", baseline=None, confidence: float = 0.95):
    """Paired comparison of two or more models evaluated on the same tasks (module docstring).

    Models: :class:`~kgeval.Results` (with their rank table), :class:`~kgeval.RankTable`, lists of
    replicate Results, or models read from run directories (:func:`kgeval.compare` reads them,
    :func:`kgeval.workflow.comparison.run_model`), each optionally as ``(name, model)``. Runs are
    named by their directory, others by a ``name`` attribute or ``model1``, ``model2``, ...
    More than two models: every pair in the given order, or each against ``baseline`` (a
    name or position). ``seed`` makes every resampling deterministic.
    """
    models = _models([results_a, results_b, *more])
    test = _choice("test", test, TESTS)
    rank_type = _choice("rank type", rank_type, ("optimistic", "pessimistic", "realistic"))
    side = "both" if str(side).strip().lower() == "both" else Side.parse(side).label
    confidence = check_probability("confidence", confidence)
    # every table has the bootstrap interval of the difference (ci_low, ci_high), whatever the test:
    # one resample gave a point ([0.039, 0.039] beside the difference 0.0455)
    check_num_resamples("num_resamples", num_resamples, confidence, what="the interval of the difference")
    check_seed("seed", seed, allow_none=True)
    correction = check_correction(correction)
    chosen = _metric_list(metrics, test)
    pairs = _pairs(models, baseline)
    prepared = []
    for a, b in pairs:
        check_protocols(a, b)
        prepared.append((a, b, _paired_tasks(a, b, side, rank_type)))
    jobs = [paired.Job(tasks, metric, tasks.unit_sums(metric)) for _, _, tasks in prepared for _, metric in chosen]
    results = _resample(jobs, test, num_resamples, seed)
    rows = []
    for (a, b, tasks), i in zip(prepared, range(0, len(jobs), len(chosen))):
        for (label, metric), job, res in zip(chosen, jobs[i:i + len(chosen)], results[i:i + len(chosen)]):
            base = dict(model_a=a.name, model_b=b.name, metric=label, higher_is_better=bool(metric.increasing))
            rows.append({**base, **_task_row(job, test, confidence, *res)})
            if a.replicated and b.replicated:
                rows.append({**base, **_run_row(tasks, metric, confidence)})
    for level in ("task", "run"):
        idx = [i for i, r in enumerate(rows) if r["level"] == level]
        for i, p in zip(idx, correct([rows[i]["p_value"] for i in idx], correction)):
            rows[i]["p_corrected"] = float(p)
    return _table([{c: r.get(c) for c in COLUMNS} for r in rows])


#: p_method of a bootstrap test that has no null spread (one unit, or the same difference in every unit)
_NO_SPREAD = "{} (undefined: every resample has the observed difference; use test='permutation')"
#: p_method of a run-level test whose runs have no spread (each model: one value in every run)
_NO_RUN_SPREAD = "welch t (undefined: every run of each model has the same value)"


def _choice(what: str, value, choices) -> str:
    name = str(value).strip().lower()
    if name not in choices:
        raise unknown_name(what, value, choices)
    return name


def _models(items) -> list[Model]:
    models = [as_model(item, i) for i, item in enumerate(items)]
    names = [m.name for m in models]
    for m in models:  # two runs may share a directory name (seed42/ of two replicate sets)
        if names.count(m.name) > 1 and m.path is not None:
            m.name = f"{m.path.absolute().parent.name}/{m.name}"
    seen: dict[str, int] = {}
    for m in models:
        seen[m.name] = seen.get(m.name, 0) + 1
        if seen[m.name] > 1:
            m.name = f"{m.name} ({seen[m.name]})"
    return models


def _metric_list(metrics, test: str) -> list[tuple[str, object]]:
    if metrics is None:
        metrics = DEFAULT_METRICS
    if isinstance(metrics, str):
        metrics = [metrics]
    try:
        metrics = list(metrics)
    except TypeError:
        raise InvalidInputError(f"metrics: expected metric names, got {type(metrics).__name__}") from None
    chosen = []
    for name in metrics:
        try:
            chosen.append((str(name), _metrics.get(name)))
        except UnknownNameError as exc:
            if isinstance(name, str) and "." in name:  # a results key (side.rank_type.metric)
                raise UnknownNameError(f"{exc} (compare takes metric names; the side and rank type are its "
                                       "side= and rank_type= arguments, not part of the name)") from None
            raise
    if not chosen:
        raise InvalidInputError("metrics: name at least one metric to compare")
    first: dict[str, str] = {}
    for name, metric in chosen:  # a repeated metric was a second row, counted twice by the correction
        if metric.key in first:
            same = "given twice" if first[metric.key] == name else f"the same metric as {first[metric.key]!r}"
            raise InvalidInputError(f"metrics: {name!r} is {same} ({metric.key}); name each metric once")
        first[metric.key] = name
    for name, metric in chosen:
        if metric.needs_candidates:
            raise InvalidInputError(f"metric {name!r} depends on the candidate counts (adjusted / z metrics): "
                                    "compare its base metric instead")
        if test != "bootstrap" and not paired.decomposable(metric):
            raise InvalidInputError(f"the {test} test needs a metric that is a mean over tasks; {name!r} is not "
                                    "(use test='bootstrap', which works for every metric)")
    return chosen


def _pairs(models: list[Model], baseline) -> list[tuple[Model, Model]]:
    if baseline is None:
        return list(combinations(models, 2))
    names = [m.name for m in models]
    if isinstance(baseline, int) and not isinstance(baseline, bool):
        if not 0 <= baseline < len(models):
            raise InvalidInputError(f"baseline position {baseline} is out of range (0..{len(models) - 1})")
        ref = models[baseline]
    elif baseline in names:
        ref = models[names.index(baseline)]
    else:
        raise unknown_name("baseline model", baseline, names)
    return [(m, ref) for m in models if m is not ref]


def _paired_tasks(a: Model, b: Model, side: str, rank_type: str) -> paired.PairedTasks:
    ref = a.tables[0]
    tables_a = [align(ref, t, (a.name, a.name)) for t in a.tables]
    tables_b = [align(ref, t, (a.name, b.name)) for t in b.tables]
    if side != "both":
        mask = ref.side == Side.parse(side)
        if not mask.any():
            raise InvalidInputError(f"the rank tables have no {side!r} tasks (sides: {ref.sides or ['unspecified']})")
        tables_a, tables_b = ([t.subset(mask) for t in ts] for ts in (tables_a, tables_b))
    weight = tables_a[0].weight
    if weight is not None and not np.any(weight > 0):
        raise InvalidInputError(f"every {side!r} task has weight 0: no metric is defined")
    return paired.PairedTasks(tables_a, tables_b, rank_type)


def _resample(jobs: list[paired.Job], test: str, num_resamples: int, seed) -> list[tuple]:
    """``(bootstrap differences, (p, how) or None)`` of every job. One set of resamples serves every
    metric and pair with the same number of units (normally all of them): one stream of bootstrap
    draws and one of sign patterns per such group, both from ``seed``."""
    groups: dict[int, list[int]] = {}
    for j, job in enumerate(jobs):
        groups.setdefault(job.tasks.num_units, []).append(j)
    streams = np.random.SeedSequence(seed).spawn(2 * len(groups))
    out: list = [None] * len(jobs)
    for g, (n, members) in enumerate(groups.items()):
        boot_rng, sign_rng = (np.random.default_rng(s) for s in streams[2 * g:2 * g + 2])
        tests: list = [None] * len(members)
        diffs = paired.paired_bootstrap([jobs[j] for j in members], n, num_resamples=num_resamples, rng=boot_rng,
                                        studentize=test == "bootstrap")
        if test == "bootstrap":  # bootstrap-t where the metric decomposes, else the centred percentile test
            diffs, tstats = diffs
            for k, j in enumerate(members):
                if jobs[j].sums is not None:
                    p = paired.bootstrap_t_p_value(tstats[:, k], paired.observed_t(jobs[j].sums))
                    tests[k] = (p, "bootstrap-t" if not math.isnan(p) else _NO_SPREAD.format("bootstrap-t"))
        if test == "permutation":  # every member decomposes (checked by _metric_list)
            d = np.column_stack([jobs[j].sums[0] - jobs[j].sums[1] for j in members])
            p, how = paired.sign_flip_p_values(d, num_resamples=num_resamples, rng=sign_rng)
            tests = [(float(x), how) for x in p]
        for k, j in enumerate(members):
            out[j] = (diffs[:, k], tests[k])
    return out


def _task_row(job: paired.Job, test: str, confidence: float, diffs: np.ndarray, resampled_test) -> dict:
    tasks, metric = job.tasks, job.metric
    va, vb = tasks.values(metric)
    finite = diffs[np.isfinite(diffs)]
    alpha = 1 - confidence
    low, high = (np.quantile(finite, [alpha / 2, 1 - alpha / 2]) if finite.size else (math.nan, math.nan))
    row = dict(level="task", test=test, value_a=va, value_b=vb, difference=va - vb, ci_low=float(low),
               ci_high=float(high), num_units=tasks.num_units)
    d = w = None
    if job.sums is not None:
        sa, sb, w = job.sums[:3]
        d = sa - sb
    # the per-unit effects are measured on the additive scale (Σ h(r)); signed like A − B of the metric itself
    sign = 1.0 if job.sums is None else paired.orientation(job.sums[3])
    if test == "permutation":
        p, how = resampled_test
    elif test == "wilcoxon":
        p, r = paired.wilcoxon_test(d, w)
        return {**row, "p_value": p, "p_method": "wilcoxon", "effect_size": sign * r,
                "effect_kind": "rank-biserial r"}
    elif resampled_test is not None:  # bootstrap-t
        p, how = resampled_test
    else:
        p = paired.bootstrap_p_value(diffs, va - vb)
        how = _NO_SPREAD.format("bootstrap") if math.isnan(p) and np.isfinite(diffs).any() else "bootstrap"
    if d is None:  # no per-unit decomposition (e.g. the median): no standardised difference
        return {**row, "p_value": p, "p_method": how, "effect_size": math.nan, "effect_kind": None}
    return {**row, "p_value": p, "p_method": how, "effect_size": sign * paired.standardised_difference(d, w),
            "effect_kind": "cohen d_z (units)"}


#: relative resolution of a float64 metric value: a bound on its rounding error (pairwise sums over up
#: to 2³¹ tasks: ≲ 50 u relative; GMR's exp of a mean log multiplies it by log of the largest rank,
#: ≤ 44), with margin: 2⁻⁴⁰ ≈ 9.1e-13 = 8192 u. Per-run values closer than this (relative to the
#: largest) cannot be told apart from the same value summed in another order
RUN_RESOLUTION = 2.0 ** -40


def _run_row(tasks: paired.PairedTasks, metric, confidence: float) -> dict:
    """Welch's t-test of the per-run values of two replicated models (each seed one observation).

    Spreads and differences below the values' floating-point resolution (:data:`RUN_RESOLUTION`
    relative to the largest |value|) are rounding, not information: a model whose runs agree to
    it has no spread (variance 0), and two such models whose values agree to it are not different
    (p = 1). Without this, per-seed values that are one value summed in different orders (e.g.
    the same reciprocal ranks at other positions) gave p = 0.026 (3 seeds) and 0.010 (10 seeds), and
    one model constant beside another whose runs differ by 1 ulp gave p = 1.6e-31, d = 2e15."""
    from scipy.stats import t as t_dist
    from scipy.stats import ttest_ind

    def per_run(tables):
        return np.array([metric(t.ranks(tasks.rank_type), t.num_candidates, t.weight) for t in tables])

    # sorted: the order the seeds are listed in changes no bit of the row (as paired.replicate_mean)
    xa, xb = np.sort(per_run(tasks.tables_a)), np.sort(per_run(tasks.tables_b))
    row = dict(level="run", test="welch t", value_a=float(xa.mean()), value_b=float(xb.mean()),
               difference=float(xa.mean() - xb.mean()), num_units=int(xa.size + xb.size), p_method="welch t",
               effect_kind="cohen d (runs)", ci_low=math.nan, ci_high=math.nan, p_value=math.nan,
               effect_size=math.nan)
    if xa.size < 2 or xb.size < 2:  # a replicate set of one run: no spread to test with
        return {**row, "p_method": "welch t (undefined: a model with fewer than 2 runs)"}
    values = np.concatenate([xa, xb])
    if not np.isfinite(values).all():
        return {**row, "p_method": "welch t (undefined: a run's value is not finite)"}
    resolution = RUN_RESOLUTION * float(np.max(np.abs(values)))
    flat_a, flat_b = np.ptp(xa) <= resolution, np.ptp(xb) <= resolution
    if flat_a and flat_b:
        # every run of each model has one value up to rounding (hits@k of seeds that rank alike, or
        # one value summed in other orders): no spread, so Welch's t is 0/0 or ±inf. Tested on the
        # values themselves, not on the variance, which the rounding of the mean leaves at ~1e-32 for
        # some constant values (p ~1e-28, d ~1e13 instead). Where the values are exactly constant,
        # those reported are the runs' own: the mean of k equal floats may round away from them
        if np.ptp(xa) == 0 and np.ptp(xb) == 0:
            row.update(value_a=float(xa[0]), value_b=float(xb[0]), difference=float(xa[0] - xb[0]))
        diff = row["difference"]
        row.update(ci_low=diff, ci_high=diff)
        if abs(diff) <= resolution:
            return {**row, "p_value": 1.0}
        return {**row, "p_method": _NO_RUN_SPREAD}
    if not (flat_a or flat_b):
        pooled = math.sqrt(((xa.size - 1) * xa.var(ddof=1) + (xb.size - 1) * xb.var(ddof=1))
                           / (xa.size + xb.size - 2))
        res = ttest_ind(xa, xb, equal_var=False)
        ci = res.confidence_interval(confidence)
        return {**row, "p_value": float(res.pvalue), "ci_low": float(ci.low), "ci_high": float(ci.high),
                "effect_size": row["difference"] / pooled}
    # one model's runs agree to rounding: Welch's t with its variance 0, not that of its rounding noise
    va, vb = (0.0 if flat else float(x.var(ddof=1)) for x, flat in ((xa, flat_a), (xb, flat_b)))
    sa2, sb2 = va / xa.size, vb / xb.size
    se = math.sqrt(sa2 + sb2)
    df = (sa2 + sb2) ** 2 / (sa2 ** 2 / (xa.size - 1) + sb2 ** 2 / (xb.size - 1))
    diff = row["difference"]
    p = float(2 * t_dist.sf(abs(diff) / se, df))
    half = float(t_dist.ppf(0.5 + confidence / 2, df)) * se
    pooled = math.sqrt(((xa.size - 1) * va + (xb.size - 1) * vb) / (xa.size + xb.size - 2))
    return {**row, "p_value": min(p, 1.0), "ci_low": diff - half, "ci_high": diff + half,
            "effect_size": diff / pooled}


def _table(records: list[dict]):
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional
        return records
    return pd.DataFrame.from_records(records, columns=list(COLUMNS))
