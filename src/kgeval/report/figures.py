"""The report's figures, drawn with matplotlib (Agg) and returned as inline SVG text.

- :func:`figure_one`: seed 004's Figure 1, models x datasets: the raw metric, its adjusted
  index and its z-score (datasets left to right by number of entities);
- :func:`rank_distribution`: a run's ranks per side against the null model's, where rank
  i is uniform on 1..C_i, so the expected count of bin [a, b) is sum_i |[a, b) ∩ [1, C_i]| / C_i;
- :func:`relation_figure`: the metric per relation with its confidence interval;
- :func:`candidates_figure`: the metric against the number of candidates, beside its null
  expectation, in quantile bins of C.
"""

from __future__ import annotations

import io

import numpy as np

from .._compat import install_hint
from .. import metrics as _metrics
from ..keys import flat_key
from .._escape import mathtext_literal
from .model import RANK_TYPE, base_metric, derived_keys


def _pyplot():
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - the report extra
        from ..errors import InvalidInputError

        raise InvalidInputError(f"figures need matplotlib: {install_hint('report', 'matplotlib')}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "kgeval"  # stable ids: the same runs give the same file
    return plt


def to_svg(fig) -> str:
    """The figure as an ``<svg>`` element (no XML prolog), then closed."""
    plt = _pyplot()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def plain_log_ticks(axis) -> None:
    """Tick labels of a log axis as plain numbers (1, 10, 100, 1,000) instead of 10^k in mathtext."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    axis.set_major_locator(LogLocator(base=10))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))


def figure_one(runs, metric: str) -> str:
    """Raw metric, adjusted index and z-score of every (model, dataset), as grouped bars."""
    plt = _pyplot()
    base = base_metric(metric)
    adj_key, z_key = derived_keys(base)
    datasets = sorted({r.dataset for r in runs}, key=lambda d: min(r.num_entities or 0 for r in runs if r.dataset == d))
    # one bar series per run label without its dataset: the model, or the model and directory where
    # one model has several runs on a dataset (seeds): each run keeps its own bar
    series = {(series_label(r), r.dataset): r for r in runs}
    models = sorted({s for s, _ in series})
    keys = (base.key, adj_key, z_key)
    values = {name: _figure_one_values(run.results, keys) for name, run in series.items()}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    width = 0.8 / max(1, len(models))
    for ax, key, title in zip(axes, keys, (base.key, f"adjusted index ({adj_key})", z_key)):
        # MR's raw panel runs the other way from its adjusted index and z-score: say so on each axis
        ax.set_ylabel(direction(_metrics.get(key)), fontsize=8)
        for j, model in enumerate(models):
            raw = [values.get((model, d), {}).get(key) for d in datasets]
            raw = [np.nan if v is None else float(v) for v in raw]
            x = np.arange(len(datasets)) + (j - (len(models) - 1) / 2) * width
            bars = ax.bar(x, [v if np.isfinite(v) else np.nan for v in raw], width, label=mathtext_literal(model),
                          color=model_colour(model))
            for xi, h, d, bar in zip(x, raw, datasets, bars):
                if (model, d) in series and not np.isfinite(h):
                    # a run whose value is NaN or infinite drew no bar, like a model not run on the dataset
                    ax.text(xi, 0, "n/a" if np.isnan(h) else f"{h:+}", rotation=90, ha="center", va="bottom",
                            fontsize=7, color=bar.get_facecolor())
        ax.set_xticks(range(len(datasets)), [mathtext_literal(d) for d in datasets])
        ax.set_title(mathtext_literal(title), fontsize=9)
        ax.axhline(0, color="black", linewidth=0.6)
    z_values = [abs(b.get_height()) for b in axes[2].patches if np.isfinite(b.get_height()) and b.get_height() != 0]
    if z_values and max(z_values) > 100 * max(1.0, min(z_values)):
        # z grows like sqrt(#tasks): on a linear axis the large datasets flatten the small ones to zero
        axes[2].set_yscale("symlog", linthresh=1.0)
        axes[2].set_title(mathtext_literal(f"{z_key} (symlog scale)"), fontsize=9)
    # outside the axes: inside, the legend hid bars
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=len(models), fontsize=8,
               bbox_to_anchor=(0.5, -0.06), frameon=False)
    fig.suptitle("raw metric, adjusted index and z-score (both sides, realistic ranks)", fontsize=10)
    return to_svg(fig)


def _figure_one_values(results, keys) -> dict:
    """``{key: value}`` of a run (both sides, realistic ranks): from its ``results.json`` where
    saved there, else computed from its rank table (a metric that the run did not save)."""
    values = {key: results.value("both", RANK_TYPE, key) for key in keys}
    if any(v is None for v in values.values()):
        from ..results import Results

        # a wrapper in the list makes Results keep the base metric's null moments
        again = Results(results.rank_table, metrics=list(keys), rank_types=[RANK_TYPE])
        values = {key: again.value("both", RANK_TYPE, key) if v is None else v for key, v in values.items()}
    return values


def direction(metric) -> str:
    """``higher is better`` or ``lower is better``: the metric's direction, for axis labels."""
    return "higher is better" if metric.increasing else "lower is better"


#: the colours of models in every figure (matplotlib's tab10, colour-blind friendlier than its default cycle order)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def model_colour(name: str) -> str:
    """The colour of a model, from its name alone: the same model has the same colour in every report
    (a stable digest, not Python's per-process salted ``hash``).

    Examples
    --------
    >>> model_colour("complex") == model_colour("complex")
    True
    """
    import hashlib

    return PALETTE[int(hashlib.sha256(name.encode("utf-8")).hexdigest()[:8], 16) % len(PALETTE)]


def series_label(run) -> str:
    """The run's label in Figure 1's legend: its name without `` on <dataset>``."""
    return run.name.replace(f" on {run.dataset}", "", 1)


def null_bin_counts(num_candidates: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Expected number of ranks in each integer bin [edges[j], edges[j+1]) under the null."""
    cs, counts = np.unique(num_candidates, return_counts=True)
    lo, hi = edges[:-1][None, :], edges[1:][None, :]
    inside = np.clip(np.minimum(hi, cs[:, None] + 1) - lo, 0, None)  # integers of the bin that are <= C
    return (counts[:, None] * inside / cs[:, None]).sum(axis=0)


def rank_distribution(results) -> str:
    """Histogram of the realistic ranks per side (log bins) against the null model's."""
    plt = _pyplot()
    table = results.rank_table
    sides = table.sides or ["both"]
    fig, axes = plt.subplots(1, len(sides), figsize=(5 * len(sides), 3.2), squeeze=False)
    for ax, side in zip(axes[0], sides):
        sub = table.select_side(side)
        ranks, cs = sub.ranks(RANK_TYPE), np.asarray(sub.num_candidates)
        edges = np.unique(np.round(np.logspace(0, np.log10(cs.max() + 1), 16)).astype(np.int64))
        observed, _ = np.histogram(ranks, bins=edges)
        ax.stairs(observed, edges, label="model", fill=True, alpha=0.6)
        ax.stairs(null_bin_counts(cs, edges), edges, label="null (uniform on 1..C)", linewidth=1.5)
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel(f"{RANK_TYPE} rank")
        ax.set_ylabel("tasks")
        ax.set_title(f"{side} ranks", fontsize=9)
        ax.legend(fontsize=8)
    return to_svg(fig)


def relation_figure(rows: list[dict], metric: str, confidence: float | None = None) -> str:
    """The metric per relation (sorted), with its ``confidence`` interval where there is one."""
    plt = _pyplot()
    rows = sorted(rows, key=lambda r: r["value"])
    fig, ax = plt.subplots(figsize=(6, max(2.5, 0.16 * len(rows) + 1)))
    y = np.arange(len(rows))
    values = np.array([r["value"] for r in rows])
    lows = np.array([np.nan if r["ci_low"] is None else r["ci_low"] for r in rows])
    highs = np.array([np.nan if r["ci_high"] is None else r["ci_high"] for r in rows])
    ax.plot(values, y, "o", markersize=3)
    has = ~np.isnan(lows)
    if has.any():
        # segments, not error bars: a BCa interval need not contain the point estimate
        ax.hlines(y[has], lows[has], highs[has], linewidth=0.8)
    ax.set_yticks(y, [mathtext_literal(r["relation"]) for r in rows], fontsize=6)
    # the segments' level was on the page only, not on the figure
    level = "" if confidence is None or not has.any() else f"; lines: {100 * confidence:g}% bootstrap CI"
    ax.set_xlabel(f"{mathtext_literal(metric)} (both sides, {RANK_TYPE} ranks; "
                  f"{direction(_metrics.get(metric))}{level})")
    ax.set_ylabel("relation id")
    return to_svg(fig)


def candidates_figure(results, metric: str, num_bins: int = 8) -> str:
    """The metric in quantile bins of the number of candidates, beside its null expectation."""
    from ..results import Results

    plt = _pyplot()
    base = base_metric(metric)
    table = results.rank_table
    cs = np.asarray(table.num_candidates)
    edges = np.unique(np.quantile(cs, np.linspace(0, 1, num_bins + 1)))
    which = np.clip(np.searchsorted(edges, cs, side="right") - 1, 0, max(0, len(edges) - 2))
    centres, observed, expected = [], [], []
    for b in np.unique(which):
        # a wrapper in the list makes Results keep the base metric's null moments
        sub = Results(table.subset(which == b), metrics=[base.key, derived_keys(base)[1]], rank_types=[RANK_TYPE])
        centres.append(float(np.median(cs[which == b])))
        observed.append(sub.value("both", RANK_TYPE, base.key))
        expected.append(sub.null_moments["both"][base.key].mean)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(centres, observed, "o-", label="model")
    ax.plot(centres, [np.nan if e is None else e for e in expected], "s--", label="null expectation")
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set_xlabel("number of candidates C (median of the bin)")
    ax.set_ylabel(f"{flat_key('both', RANK_TYPE, base.key)}\n({direction(base)})", fontsize=8)
    ax.legend(fontsize=8)
    return to_svg(fig)
