"""The report's figures, drawn with matplotlib (Agg) and returned as inline SVG text.

- :func:`figure_one`: Figure 1 of Hoyt et al. (2022), "A Unified Framework for Rank-based Evaluation
  Metrics for Link Prediction in Knowledge Graphs" (arXiv:2203.07544), on these runs: models x datasets,
  the raw metric, its adjusted index and its z-score (datasets left to right by number of entities);
- :func:`rank_distribution`: a run's ranks per side against the null model's, where rank
  i is uniform on 1..C_i, so the expected count of bin [a, b) is sum_i |[a, b) ∩ [1, C_i]| / C_i;
- :func:`relation_figure`: the metric per relation with its confidence interval;
- :func:`candidates_figure`: the metric against the number of candidates, beside its null
  expectation, in quantile bins of C.

A model has one colour in every figure of every report (:func:`model_colour`, from its name alone), and
log axes are labelled with plain numbers (:func:`plain_log_ticks`).
"""

from __future__ import annotations

import io

import numpy as np

from .._compat import install_hint
from .. import metrics as _metrics
from .._escape import mathtext_literal
from .model import RANK_TYPE, base_metric, derived_keys, run_label, short_name


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


def plain_number(v: float) -> str:
    """A tick label: ``1``, ``20``, ``1,000``, ``0.5``, ``-100`` (never ``10^k`` in mathtext)."""
    if v == 0:
        return "0"
    return f"{v:,.0f}" if abs(v) >= 1 and float(v).is_integer() else f"{v:,g}"


def plain_log_ticks(axis) -> None:
    """Tick labels of a log axis as plain numbers (1, 10, 100, 1,000) instead of 10^k in mathtext; an axis
    that spans less than two decades (ranks 1 to 15) labels its minor ticks 2 and 5 x 10^k too, one that
    spans less than a factor 3 (90 to 104 candidates) each minor tick, plainly (matplotlib labelled them
    ``9 x 10^1``)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    axis.set_major_locator(LogLocator(base=10))
    axis.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v)))
    axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)))

    def minor(v, _):
        low, high = sorted(axis.get_view_interval())
        if low <= 0 or high / low >= 100:
            return ""  # two decades or more: their labels suffice
        if high / low < 3:
            return plain_number(v)  # a narrow range: every minor tick
        return plain_number(v) if round(v / 10 ** np.floor(np.log10(v))) in (2, 5) else ""

    axis.set_minor_formatter(FuncFormatter(minor))


def plain_symlog_ticks(axis) -> None:
    """Tick labels of a symlog axis as plain numbers (``-100``, ``0``, ``1,000``)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v)))
    axis.set_minor_formatter(NullFormatter())


def figure_one(runs, metric: str) -> str:
    """Raw metric, adjusted index and z-score of every (model, dataset), as grouped bars."""
    plt = _pyplot()
    base = base_metric(metric)
    adj_key, z_key = derived_keys(base)
    order = list(dict.fromkeys(r.dataset for r in runs))  # stable for equal sizes (a set's order is not)
    datasets = sorted(order, key=lambda d: (min(r.num_entities or 0 for r in runs if r.dataset == d), order.index(d)))
    # one bar series per run label without its dataset: the model, or the model and directory where
    # one model has several runs on a dataset (seeds): each run keeps its own bar
    series = {(series_label(r), r.dataset): r for r in runs}
    models = sorted({s for s, _ in series})
    keys = (base.key, adj_key, z_key)
    values = {name: _figure_one_values(run.results, keys) for name, run in series.items()}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    width = 0.8 / max(1, len(models))
    styles = series_styles(models)
    name = short_name(base)
    titles = (f"{name} ({base.key})", f"adjusted index ({adj_key})", f"z-score ({z_key})")
    for ax, key, title in zip(axes, keys, titles):
        # MR's raw panel runs the other way from its adjusted index and z-score: say so on each axis
        ax.set_ylabel(direction(_metrics.get(key)), fontsize=8)
        for j, model in enumerate(models):
            raw = [values.get((model, d), {}).get(key) for d in datasets]
            raw = [np.nan if v is None else float(v) for v in raw]
            x = np.arange(len(datasets)) + (j - (len(models) - 1) / 2) * width
            colour, hatch = styles[model]
            bars = ax.bar(x, [v if np.isfinite(v) else np.nan for v in raw], width, label=mathtext_literal(model),
                          color=colour, hatch=hatch, edgecolor="white" if hatch else None)
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
        plain_symlog_ticks(axes[2].yaxis)
        axes[2].set_title(mathtext_literal(f"z-score ({z_key}; symlog scale)"), fontsize=9)
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


def series_styles(labels) -> dict[str, tuple[str, str | None]]:
    """``{label: (colour, hatch)}`` of the series of one figure: each its :func:`model_colour`; a label whose
    colour an earlier one of the figure already has is hatched (``//``, ``..``, ...), so that no two series
    of a figure look alike while each keeps its own colour."""
    hatches = (None, "//", "..", "xx", "\\\\", "++", "oo")
    used: dict[str, int] = {}
    out = {}
    for label in labels:
        colour = model_colour(label)
        out[label] = (colour, hatches[used.get(colour, 0) % len(hatches)])
        used[colour] = used.get(colour, 0) + 1
    return out


def series_label(run) -> str:
    """The run's label in Figure 1's legend: its name without `` on <dataset>``."""
    return run_label(run)


def null_bin_counts(num_candidates: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Expected number of ranks in each integer bin [edges[j], edges[j+1]) under the null."""
    cs, counts = np.unique(num_candidates, return_counts=True)
    lo, hi = edges[:-1][None, :], edges[1:][None, :]
    inside = np.clip(np.minimum(hi, cs[:, None] + 1) - lo, 0, None)  # integers of the bin that are <= C
    return (counts[:, None] * inside / cs[:, None]).sum(axis=0)


#: the null model's colour (a dark grey no model gets: the palette has no grey this dark)
NULL_COLOUR = "#333333"


def rank_distribution(results, label: str | None = None) -> str:
    """Histogram of the realistic ranks per side (log bins) against the null model's; the model's bars in
    its colour (``label``: the model's name)."""
    colour = None if label is None else model_colour(label)
    plt = _pyplot()
    table = results.rank_table
    sides = table.sides or ["both"]
    fig, axes = plt.subplots(1, len(sides), figsize=(5 * len(sides), 3.2), squeeze=False)
    for ax, side in zip(axes[0], sides):
        sub = table.select_side(side)
        ranks, cs = sub.ranks(RANK_TYPE), np.asarray(sub.num_candidates)
        edges = np.unique(np.round(np.logspace(0, np.log10(cs.max() + 1), 16)).astype(np.int64))
        observed, _ = np.histogram(ranks, bins=edges)
        ax.stairs(observed, edges, label=mathtext_literal(label or "model"), fill=True, alpha=0.6, color=colour)
        ax.stairs(null_bin_counts(cs, edges), edges, label="null (uniform on 1..C)", linewidth=1.5, color=NULL_COLOUR)
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel(f"{RANK_TYPE} rank")
        ax.set_ylabel("tasks")
        ax.set_title(f"{side} ranks", fontsize=9)
        ax.legend(fontsize=8)
    return to_svg(fig)


def relation_figure(rows: list[dict], metric: str, confidence: float | None = None, label: str | None = None) -> str:
    """The metric per relation (sorted), with its ``confidence`` interval where there is one, in the colour of
    the model ``label``."""
    plt = _pyplot()
    colour = None if label is None else model_colour(label)
    rows = sorted(rows, key=lambda r: r["value"])
    fig, ax = plt.subplots(figsize=(6, max(2.5, 0.16 * len(rows) + 1)))
    y = np.arange(len(rows))
    values = np.array([r["value"] for r in rows])
    lows = np.array([np.nan if r["ci_low"] is None else r["ci_low"] for r in rows])
    highs = np.array([np.nan if r["ci_high"] is None else r["ci_high"] for r in rows])
    ax.plot(values, y, "o", markersize=3, color=colour)
    has = ~np.isnan(lows)
    if has.any():
        # segments, not error bars: a BCa interval need not contain the point estimate
        ax.hlines(y[has], lows[has], highs[has], linewidth=0.8, color=colour)
    ax.set_yticks(y, [mathtext_literal(r["relation"]) for r in rows], fontsize=6)
    # the segments' level was on the page only, not on the figure
    level = "" if confidence is None or not has.any() else f"; lines: {100 * confidence:g}% bootstrap CI"
    ax.set_xlabel(f"{mathtext_literal(short_name(_metrics.get(metric)))} (both sides, {RANK_TYPE} ranks; "
                  f"{direction(_metrics.get(metric))}{level})")
    ax.set_ylabel("relation")
    return to_svg(fig)


def candidates_figure(results, metric: str, label: str | None = None, num_bins: int = 8) -> str:
    """The metric in quantile bins of the number of candidates, beside its null expectation; the model's line
    in its colour (``label``). The candidate axis is logarithmic where the counts span a decade or more."""
    from ..results import Results

    plt = _pyplot()
    base = base_metric(metric)
    # the pooled tasks: 'both' (head + tail); a run of relation prediction alone: its relation tasks
    side = "both" if results.rank_table.has_entity_tasks else "relation"
    table = results.rank_table.select_side(side)
    cs = np.asarray(table.num_candidates)
    edges = np.unique(np.quantile(cs, np.linspace(0, 1, num_bins + 1)))
    which = np.clip(np.searchsorted(edges, cs, side="right") - 1, 0, max(0, len(edges) - 2))
    centres, observed, expected = [], [], []
    for b in np.unique(which):
        # a wrapper in the list makes Results keep the base metric's null moments
        sub = Results(table.subset(which == b), metrics=[base.key, derived_keys(base)[1]], rank_types=[RANK_TYPE])
        centres.append(float(np.median(cs[which == b])))
        observed.append(sub.value(side, RANK_TYPE, base.key))
        expected.append(sub.null_moments[side][base.key].mean)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(centres, observed, "o-", label=mathtext_literal(label or "model"),
            color=None if label is None else model_colour(label))
    ax.plot(centres, [np.nan if e is None else e for e in expected], "s--", label="null expectation", color=NULL_COLOUR)
    if cs.min() > 0 and cs.max() / cs.min() >= 10:
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
    ax.set_xlabel("number of candidates C (median of the bin)")
    ax.set_ylabel(f"{mathtext_literal(short_name(base))} (both sides, {RANK_TYPE} ranks;\n{direction(base)})",
                  fontsize=8)
    ax.legend(fontsize=8)
    return to_svg(fig)
