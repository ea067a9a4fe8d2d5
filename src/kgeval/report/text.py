"""Text forms of a report: Markdown, LaTeX, CSV (the headline rows of every run) and JSON (all of it).

Numbers are written with :func:`fmt` (4 significant decimals, scientific outside the usual
range); CSV and JSON carry the full ``repr`` precision so that they read back exactly. Names (runs,
datasets, directories, metrics) go through :mod:`kgeval._escape` for each format: a ``|`` or an HTML tag in
a run name stays text in Markdown, ``^``/``~`` in LaTeX, and no CSV cell starts a spreadsheet formula.
"""

from __future__ import annotations

import csv
import io
import json
import math

from .._escape import csv_text, latex_text, markdown_code, markdown_text
from .._json import finite_or_none
from .._format import EMPTY, format_p, format_value, truthful
from .. import metrics as _metrics
from .breakdowns import category_markdown
from .model import RANK_TYPE, argument, run_label, short_name

#: the columns of the headline table (key in the row, header)
COLUMNS = (("value", "value"), ("ci", "CI"), ("adjusted", "adjusted index"), ("z", "z"), ("p", "p"))


def headers(report) -> list[str]:
    """The headline columns' headers: the interval's level and what the p-value is tested against."""
    return ["value", f"{100 * report.confidence:g}% CI", "adjusted index", "z", "p vs chance"]


def legend(report) -> str:
    """What the headline table's numbers are (Markdown, LaTeX comment, HTML)."""
    return (f"Headline rows: {RANK_TYPE} ranks (ties count half); CI: {100 * report.confidence:g}% BCa bootstrap "
             "interval over evaluation triples (the both-sides rows only); adjusted index: (M - E[M]) / "
             "(optimum - E[M]), 0 = chance, 1 = perfect; z: (M - E[M]) / sd[M]; p vs chance: one-sided, "
             "P(random ranks do at least as well).")


def comparison_legend(report) -> str:
    """What the pairwise comparison's numbers are."""
    return (f"A - B on the same tasks ({RANK_TYPE} ranks, both sides); CI: {100 * report.confidence:g}% paired "
            "bootstrap interval; p: two-sided paired test, corrected by Holm over the rows of each dataset.")


def p_value_text(p) -> str:
    """A p-value stored as a number only (no logarithm), in :func:`format_p`'s form."""
    if p is None:
        return EMPTY
    p = float(p)
    return format_p(math.log10(p) if p > 0 else -math.inf if p == 0 else math.nan)


def fmt(v) -> str:
    return EMPTY if v is None else format_value(float(v))


def p_text(row: dict) -> str:
    """The p-value as every kgeval table prints it (:func:`kgeval._format.format_p`),
    from its logarithm, so that one that underflows to 0 is never printed as 0."""
    if row.get("p") is None:
        return EMPTY
    log10_p = row.get("log10_p")
    return format_p(log10_p if log10_p is not None else math.log10(row["p"]) if row["p"] > 0 else None)


def cells(row: dict) -> list[str]:
    ci = EMPTY if row.get("ci_low") is None else f"[{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]"
    return [fmt(row["value"]), ci, fmt(row.get("adjusted")), fmt(row.get("z")), p_text(row)]


#: the summary table's metric columns (HTML and LaTeX): (header, headline metric, what of it)
SUMMARY_COLUMNS = (("MRR", "mrr", "value"), ("Hits@1", "hits@1", "value"), ("Hits@3", "hits@3", "value"),
                   ("Hits@10", "hits@10", "value"), ("MR", "mr", "value"), ("adjusted MRR", "mrr", "adjusted"),
                   ("z (MRR)", "mrr", "z"), ("p (MRR)", "mrr", "p"))


def summary_rows(run) -> dict:
    """``{metric: headline row}`` of a run's both-sides rows (what the summary tables show)."""
    return {row["metric"]: row for row in run.headline if row["side"] == "both"}


#: the comparison's settings in words: (row field, column header where it varies, {value: phrase})
COMPARISON_SETTINGS = (
    ("test", "test", {"permutation": "paired permutation test", "bootstrap": "paired bootstrap test",
                      "wilcoxon": "Wilcoxon signed-rank test", "welch t": "Welch's t-test over replicated runs"}),
    ("p_method", "p-values", {"monte carlo": "Monte Carlo p-values", "exact": "exact p-values",
                              "normal": "p-values by the normal approximation"}),
    ("effect_kind", "effect size", {"cohen d_z (units)": "effect size: Cohen's d_z of the per-triple differences",
                                    "rank-biserial r": "effect size: rank-biserial correlation",
                                    "cohen d (runs)": "effect size: Cohen's d over runs"}),
    ("level", "resampled", {"task": "resampling evaluation triples", "run": "over replicated runs"}),
    ("num_units", "evaluation triples", {}),
)


def setting_text(field: str, value) -> str:
    """A comparison setting as a phrase (``paired permutation test``, ``201 evaluation triples``)."""
    if field == "num_units" and isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,} evaluation triples"
    words = next((w for f, _, w in COMPARISON_SETTINGS if f == field), {})
    return str(words.get(value, value))


def comparison_groups(report) -> list[tuple[str, list[dict]]]:
    """The comparison's rows by dataset (``[(dataset, rows)]``, datasets in the report's order): each
    dataset's runs are compared among themselves, Holm's correction runs over that dataset's rows."""
    dataset_of = {r.name: r.dataset for r in report.runs}
    groups: dict[str, list[dict]] = {}
    for row in report.comparison or []:
        groups.setdefault(str(dataset_of.get(row.get("model_a"), "")), []).append(row)
    order = [str(d) for d in report.datasets()]
    return sorted(groups.items(), key=lambda g: order.index(g[0]) if g[0] in order else len(order))


def comparison_layout(report) -> tuple[list[str], dict[str, list[str]], list[tuple[str, str]]]:
    """``(settled, per_group, columns)``: the comparison settings every row shares (said once above the
    table), those each dataset shares (said in its group's header row) and those that vary within a
    dataset (a column each, ``(header, field)``)."""
    groups = comparison_groups(report)
    rows = [r for _, g in groups for r in g]
    settled, per_group, columns = [], {d: [] for d, _ in groups}, []
    for field, what, _ in COMPARISON_SETTINGS:
        if not rows or field not in rows[0]:
            continue
        if all(r.get(field) == rows[0][field] for r in rows):
            settled.append(setting_text(field, rows[0][field]))
        elif all(all(r.get(field) == g[0].get(field) for r in g) for _, g in groups):
            for d, g in groups:
                per_group[d].append(setting_text(field, g[0][field]))
        else:
            columns.append((what, field))
    return settled, per_group, columns


def pair_label(report, name: str) -> str:
    """A run of the comparison as its dataset's group names it: its label (``distmult``), else ``name``."""
    run = next((r for r in report.runs if r.name == name), None)
    return name if run is None else run_label(run)


def remake_line(report) -> str:
    """How to make this report again, in the terms of the interface that made it."""
    names = ", ".join(repr(str(r.directory)) for r in report.runs)
    settings = [("metric", report.metric), ("confidence", report.confidence)]
    if report.num_resamples is not None:
        settings.append(("num_resamples", report.num_resamples))
    if report.seed is not None:
        settings.append(("seed", report.seed))
    if report.interface == "cli":
        import shlex

        return "kgeval report " + " ".join(shlex.quote(str(r.directory)) for r in report.runs) + " -o FILE " + " ".join(
            argument(k, v, "cli") for k, v in settings)
    return f"kgeval.report.build_report([{names}], " + ", ".join(argument(k, v, "python") for k, v in settings) + ")"


def _with_direction(row: dict, short: bool = False) -> str:
    """``mr (lower better)``: which sign of A - B favours A, as ``kgeval compare`` prints it (``short``: the
    metric's short name, ``MR (lower better)``, as a paper's table names it)."""
    name = _short(row["metric"]) if short else row["metric"]
    return f"{name} ({'higher' if row['higher_is_better'] else 'lower'} better)"


def _short(name: str) -> str:
    from .. import metrics as _metrics

    try:
        return short_name(_metrics.get(name))
    except KeyError:
        return name


def _rows(report):
    for run in report.runs:
        for row in run.headline:
            yield run, row


#: the effect size's symbol in a column header, by ``effect_kind``
EFFECT_SYMBOLS = {"cohen d_z (units)": "d_z", "rank-biserial r": "r", "cohen d (runs)": "d"}


def effect_header(report) -> str:
    """``effect (d_z)`` where every row has the same kind of effect size, else ``effect``."""
    kinds = {r.get("effect_kind") for r in report.comparison or []}
    if len(kinds) != 1 or None in kinds:
        return "effect"
    kind = next(iter(kinds))
    return f"effect ({EFFECT_SYMBOLS.get(kind, kind)})"


def notes_heading(report) -> str:
    """The notes' heading (their terms are those of ``report.interface``)."""
    return "Notes"


def render_markdown(report) -> str:
    head = ["run", "side", "metric", *headers(report)]
    lines = ["# kgeval report", ""]
    for dataset, findings in report.diagnostics.items():  # what the dataset lets a model do, before any number
        lines += [f"Dataset {markdown_text(dataset)} (kgeval diagnose):", "",
                  *(f"- {markdown_text(f)}" for f in findings), ""]
    lines += [markdown_text(legend(report)), "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([*map(markdown_text, (run.name, row["side"], row["metric"])), *cells(row)]) + " |"
              for run, row in _rows(report)]
    if report.comparison:
        settled, per_group, extra = comparison_layout(report)
        groups = comparison_groups(report)
        several = len(groups) > 1
        head = (["dataset"] if several else []) + ["A", "B", "metric", "value A", "value B", "A - B",
                                                   f"{100 * report.confidence:g}% CI", "p (two-sided)",
                                                   "p corrected (Holm)", effect_header(report)] + [h for h, _ in extra]
        lines += ["", "## Pairwise comparison", "", markdown_text(comparison_legend(report)), ""]
        if settled:
            lines += [markdown_text("All rows: " + "; ".join(settled) + "."), ""]
        for dataset, _ in groups:
            if per_group.get(dataset):
                lines += [markdown_text(f"{dataset}: " + "; ".join(per_group[dataset]) + "."), ""]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for dataset, rows in groups:
            for r in rows:
                cells_ = ([markdown_text(dataset)] if several else []) + [
                    *map(markdown_text, (pair_label(report, r["model_a"]), pair_label(report, r["model_b"]),
                                         _with_direction(r))),
                    *map(fmt, (r["value_a"], r["value_b"], r["difference"])),
                    f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]",
                    p_value_text(r["p_value"]), p_value_text(r["p_corrected"]), fmt(r.get("effect_size"))] + [
                    markdown_text(setting_text(f, r.get(f))) for _, f in extra]
                lines.append("| " + " | ".join(cells_) + " |")
    if report.notes:  # below the summary and the comparison, before the runs' details
        lines += ["", f"## {notes_heading(report)}", "", *(f"- {markdown_text(n)}" for n in report.notes)]
    for run in report.runs:
        lines += ["", f"## {markdown_text(run.name)}", ""]
        lines += [f"- {markdown_text(what)}: {markdown_text(text)}" for what, text in run.setup]
        lines += [f"- directory: {markdown_text(run.directory)}", "", markdown_code(run.protocol)]
        lines += category_markdown(run, short_name(_metrics.get(report.metric)), report.confidence)
    # escaped text, not a code block: a name's "<" stays inert in every Markdown reader (the escapes are not shown)
    lines += ["", "## Reference", "", markdown_text(CITATION), "", markdown_text("Made with: " + remake_line(report))]
    return "\n".join(lines) + "\n"


#: the paper whose framework the report follows (Figure 1 of the HTML page is its Figure 1 on these runs)
CITATION = ("Hoyt, C. T., Berrendorf, M., Galkin, M., Tresp, V., & Gyori, B. M. (2022). A Unified Framework for "
            "Rank-based Evaluation Metrics for Link Prediction in Knowledge Graphs. arXiv:2203.07544.")
#: its BibTeX entry (in the LaTeX export's header and the HTML page's reference)
BIBTEX = """@article{hoyt2022unified,
  title   = {A Unified Framework for Rank-based Evaluation Metrics for Link Prediction in Knowledge Graphs},
  author  = {Hoyt, Charles Tapley and Berrendorf, Max and Galkin, Mikhail and Tresp, Volker and Gyori, Benjamin M.},
  journal = {arXiv preprint arXiv:2203.07544},
  year    = {2022},
  url     = {https://arxiv.org/abs/2203.07544}
}"""

#: the LaTeX table's columns: the summary's, with shorter headers (the caption says z and p are of MRR)
_LATEX_COLUMNS = tuple(({"adjusted MRR": "Adj. MRR", "z (MRR)": "z", "p (MRR)": "p"}.get(h, h), m, w)
                       for h, m, w in SUMMARY_COLUMNS)


def _mantissa(v: float, digits: int) -> tuple[float, int]:
    """``(m, k)`` with ``v = m 10^k``, ``1 <= |m| < 10`` after rounding ``m`` to ``digits`` decimals."""
    k = math.floor(math.log10(abs(v)))
    m = round(v / 10 ** k, digits)
    if abs(m) >= 10:  # 9.9996e-5 rounds up: 1.000 x 10^-4, not 10 x 10^-5
        m, k = m / 10, k + 1
    return m, k


def latex_number(value) -> str:
    r"""A number for a paper's table: four decimals below 1 (``0.6370``, never rounded onto a whole number),
    four significant digits up to 10^4 (``3.865``, ``217.5``), ``$m \times 10^{k}$`` outside [0.001, 10^4).

    Examples
    --------
    >>> latex_number(0.50416), latex_number(0.637), latex_number(12345.6), latex_number(3.2e-7)
    ('0.5042', '0.6370', '$1.235 \\times 10^{4}$', '$3.2 \\times 10^{-7}$')
    """
    if value is None or not math.isfinite(float(value)):
        return "--"
    v = float(value)
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1:
        return format_value(v)
    if 1 <= abs(v) < 1e4:
        return truthful(f"{v:#.4g}".rstrip("."), v)
    m, k = _mantissa(v, 3)
    return f"${m:.4g} \\times 10^{{{k}}}$"


def latex_p(row: dict) -> str:
    r"""A p-value as every kgeval table writes it (:func:`kgeval._format.format_p`: four decimals down to 0.001,
    two significant digits below), in LaTeX: ``0.0199``, ``$3.2 \times 10^{-7}$``; from its logarithm, so
    that one that underflows to 0 keeps its size.

    Examples
    --------
    >>> latex_p({"p": 0.0199, "log10_p": None}), latex_p({"p": 0.0, "log10_p": -4241.3})
    ('0.0199', '$5.0 \\times 10^{-4242}$')
    """
    log10_p = row.get("log10_p")
    if log10_p is None:
        p = row.get("p")
        if p is None:
            return "--"
        log10_p = math.log10(p) if p > 0 else -math.inf if p == 0 else math.nan
    text = format_p(log10_p)
    if "e" not in text:
        return "--" if text == "n/a" else text
    mantissa, exponent = text.split("e")
    return f"${mantissa} \\times 10^{{{int(exponent)}}}$"


def _latex_interval(row) -> str:
    """``{\\scriptsize [0.5638, 0.6343]}``: an interval in the row beneath its value."""
    return f"{{\\scriptsize [{latex_number(row['ci_low'])}, {latex_number(row['ci_high'])}]}}"


def _latex_groups(groups, width: int) -> list[str]:
    """Rows of a booktabs body: each group (a dataset) named in a row of its own, then its rows; a rule
    between groups. A dataset column beside the models made the table wider than a page."""
    lines: list[str] = []
    for i, (name, rows) in enumerate(groups):
        if i:
            lines.append(r"\midrule")
        lines.append(rf"\multicolumn{{{width}}}{{@{{}}l}}{{\textit{{{latex_text(name)}}}}} \\")
        lines += [" & ".join(cells_) + r" \\" for cells_ in rows]
    return lines


def render_latex(report) -> str:
    """Booktabs tables for a paper: the runs' headline metrics (models as rows, grouped by dataset, metrics as
    columns, each value with its bootstrap interval beneath it; both sides, realistic ranks) and the pairwise
    comparison (model pairs and metrics as rows). Numbers as :func:`latex_number`, p-values as :func:`latex_p`.
    About 500 pt wide (a two-column paper's ``table*``, a landscape page); a narrower page takes
    ``\\resizebox{\\textwidth}{!}{...}`` (graphicx) around each tabular."""
    groups = []
    for dataset, runs in report.grouped():
        rows = []
        for run in runs:
            shown = summary_rows(run)
            cells_, intervals = [latex_text(run_label(run))], [""]  # "": the row beneath, of intervals
            for _, metric, what in _LATEX_COLUMNS:
                row = shown.get(metric)
                if row is None:
                    cells_.append("--")
                elif what == "p":
                    cells_.append(latex_p(row))
                else:
                    cells_.append(latex_number(row.get(what)))
                has = row is not None and what == "value" and row.get("ci_low") is not None
                intervals.append(_latex_interval(row) if has else "")
            # the intervals beneath their values, in a smaller font: inline they made the table wider than a
            # landscape page
            rows += [cells_] + ([intervals] if any(intervals) else [])
        groups.append((dataset, rows))
    width = 1 + len(_LATEX_COLUMNS)
    lines = [r"% kgeval report: needs \usepackage{booktabs}. About 500 pt wide: table* in two columns, or wrap each",
             r"% tabular in \resizebox{\textwidth}{!}{...} (graphicx) on a narrower page.",
             r"% The metrics follow Hoyt et al. (2022), arXiv:2203.07544:"]
    lines += ["% " + line for line in BIBTEX.splitlines()]
    lines += [r"\begin{table}", r"\centering", r"\small", r"\setlength{\tabcolsep}{4pt}",
              r"\begin{tabular}{l" + "r" * len(_LATEX_COLUMNS) + "}", r"\toprule",
              " & ".join(["Model", *[h for h, _, _ in _LATEX_COLUMNS]]) + r" \\", r"\midrule"]
    lines += _latex_groups(groups, width)
    splits = sorted({r.split for r in report.runs})
    caption = (f"Link prediction on the {' and '.join(splits)} split{'s' if len(splits) > 1 else ''}, "
               f"{_filter_words(report)}, both sides (head and tail prediction), {RANK_TYPE} ranks (ties count half); "
               f"beneath each value its {100 * report.confidence:g}% BCa bootstrap interval over evaluation triples. "
               "Adj. MRR: the adjusted index of MRR, (M - E[M]) / (optimum - E[M]), 0 = chance, 1 = perfect; z: the "
               "z-score of MRR, (M - E[M]) / sd[M]; p: of MRR, one-sided, the probability that random ranks do at "
               "least as well. Metrics and their expectations under "
               "random ranking as in Hoyt et al.")
    lines += [r"\bottomrule", r"\end{tabular}", r"\caption{" + latex_text(caption) + r"\ (2022, arXiv:2203.07544).}",
              r"\label{tab:kgeval-results}", r"\end{table}"]
    if report.comparison:
        lines += ["", *_latex_comparison(report)]
    return "\n".join(lines) + "\n"


def _filter_words(report) -> str:
    filtered = {bool(r.results.protocol.get("filtered")) for r in report.runs if hasattr(r.results, "protocol")}
    words = {frozenset({True}): "filtered", frozenset({False}): "unfiltered (raw)"}
    return words.get(frozenset(filtered), "filtered or raw as each run states")


def _latex_comparison(report) -> list[str]:
    settled, per_group, extra = comparison_layout(report)
    groups = []
    for dataset, rows in comparison_groups(report):
        out = []
        for r in rows:
            interval = f"{{\\scriptsize [{latex_number(r['ci_low'])}, {latex_number(r['ci_high'])}]}}"
            out.append([latex_text(pair_label(report, r["model_a"])), latex_text(pair_label(report, r["model_b"])),
                        latex_text(_with_direction(r, short=True)), f"{latex_number(r['difference'])} {interval}",
                        latex_p({"p": r.get("p_corrected"), "log10_p": None}), latex_number(r.get("effect_size")),
                        *[latex_text(setting_text(f, r.get(f))) for _, f in extra]])
        groups.append((dataset, out))
    effect = effect_header(report)
    head = ["A", "B", "Metric", "A $-$ B", "p (Holm)",
            r"Effect ($d_z$)" if effect == "effect (d_z)" else latex_text(effect.capitalize()),
            *[latex_text(h) for h, _ in extra]]
    shared = ("; ".join(settled) + ". " if settled else "") + " ".join(
        f"{d}: " + "; ".join(v) + "." for d, v in per_group.items() if v)
    caption = (latex_text(f"Pairwise comparison on the same evaluation triples, both sides, {RANK_TYPE} ranks: A")
               + " $-$ " + latex_text(f"B with its {100 * report.confidence:g}% paired bootstrap interval; p "
                                      "two-sided, Holm-corrected over the rows of each dataset. "))
    return [r"\begin{table}", r"\centering", r"\small", r"\setlength{\tabcolsep}{4pt}",
            r"\begin{tabular}{lll" + "r" * (len(head) - 3) + "}", r"\toprule", " & ".join(head) + r" \\",
            r"\midrule", *_latex_groups(groups, len(head)), r"\bottomrule", r"\end{tabular}",
            r"\caption{" + caption + latex_text(shared.strip()) + "}",
            r"\label{tab:kgeval-comparison}", r"\end{table}"]


def render_csv(report) -> str:
    fields = ["run", "directory", "side", "metric", "key", "value", "ci_low", "ci_high", "adjusted", "z", "p",
              "log10_p", "p_method"]
    buf = io.StringIO()
    # every text cell quoted: with lineterminator "\n" a CR in a name was written bare (a row break to most
    # readers); numbers stay unquoted, written as repr (exact)
    writer = csv.DictWriter(buf, fields, extrasaction="ignore", lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writeheader()
    for run, row in _rows(report):
        writer.writerow({**{k: ("" if v is None else csv_text(v) if isinstance(v, str) else v) for k, v in row.items()},
                         "run": csv_text(run.name), "directory": csv_text(run.directory)})
    return buf.getvalue()


def render_json(report) -> str:
    return json.dumps(finite_or_none(report.to_dict()), indent=2, allow_nan=False) + "\n"


RENDERERS = {"md": render_markdown, "latex": render_latex, "csv": render_csv, "json": render_json}
