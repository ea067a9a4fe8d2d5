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
from .._format import EMPTY, format_p, format_value
from .model import RANK_TYPE

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
            "bootstrap interval; p: two-sided paired permutation test, corrected by Holm over the table's rows.")


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


def _with_direction(row: dict) -> str:
    """``mr (lower better)``: which sign of A - B favours A, as ``kgeval compare`` prints it."""
    return f"{row['metric']} ({'higher' if row['higher_is_better'] else 'lower'} better)"


def _rows(report):
    for run in report.runs:
        for row in run.headline:
            yield run, row


def render_markdown(report) -> str:
    head = ["run", "side", "metric", *headers(report)]
    lines = ["# kgeval report", "", markdown_text(legend(report)), "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([*map(markdown_text, (run.name, row["side"], row["metric"])), *cells(row)]) + " |"
              for run, row in _rows(report)]
    if report.comparison:
        lines += ["", "## Pairwise comparison", "", markdown_text(comparison_legend(report)), "",
                  f"| A | B | metric | value A | value B | A - B | {100 * report.confidence:g}% CI | p (two-sided) "
                  "| p corrected (Holm) |",
                  "|" + "---|" * 9]
        lines += ["| " + " | ".join([*map(markdown_text, (r["model_a"], r["model_b"], _with_direction(r))), *map(fmt, (
            r["value_a"], r["value_b"], r["difference"])), f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]",
            p_value_text(r["p_value"]), p_value_text(r["p_corrected"])]) + " |" for r in report.comparison]
    for run in report.runs:
        lines += ["", f"## {markdown_text(run.name)}", "", markdown_code(run.protocol)]
    if report.notes:
        lines += ["", *(f"- {markdown_text(n)}" for n in report.notes)]
    return "\n".join(lines) + "\n"


#: the LaTeX table's metric columns: (header, headline metric, what of it)
_LATEX_COLUMNS = (("MRR", "mrr", "value"), ("Hits@1", "hits@1", "value"), ("Hits@3", "hits@3", "value"),
                  ("Hits@10", "hits@10", "value"), ("MR", "mr", "value"), ("adjusted MRR", "mrr", "adjusted"),
                  ("z (MRR)", "mrr", "z"), ("p (MRR)", "mrr", "p"))


def latex_number(value) -> str:
    """A number for a paper's table: four significant digits, ``$m \\times 10^{k}$`` outside [0.001, 10^4).

    Examples
    --------
    >>> latex_number(0.50415), latex_number(12345.6), latex_number(3.2e-7)
    ('0.5042', '$1.235 \\times 10^{4}$', '$3.2 \\times 10^{-7}$')
    """
    if value is None or not math.isfinite(float(value)):
        return "--"
    v = float(value)
    if v == 0 or 1e-3 <= abs(v) < 1e4:
        return f"{v:.4g}"
    k = math.floor(math.log10(abs(v)))
    return f"${v / 10 ** k:.4g} \\times 10^{{{k}}}$"


def latex_p(row: dict) -> str:
    """A p-value always as ``$m \\times 10^{k}$`` (from its logarithm: one that underflows to 0 keeps its size)."""
    log10_p = row.get("log10_p")
    if log10_p is None:
        return "--" if row.get("p") is None else latex_number(row["p"])
    k = math.floor(log10_p)
    return f"${10 ** (log10_p - k):.2g} \\times 10^{{{k}}}$"


def render_latex(report) -> str:
    """A booktabs table for a paper: one row per run ("model on dataset"), the headline metrics as columns,
    both sides and realistic ranks, each value with its bootstrap interval where there is one."""
    spec = "l" + "r" * len(_LATEX_COLUMNS)
    lines = [r"% needs \usepackage{booktabs}", r"\begin{table}", r"\centering",
             r"\begin{tabular}{" + spec + "}", r"\toprule",
             " & ".join(["model", *[h for h, _, _ in _LATEX_COLUMNS]]) + r" \\", r"\midrule"]
    for run in report.runs:
        rows = {row["metric"]: row for row in run.headline if row["side"] == "both"}
        cells = [latex_text(run.name)]  # "model on dataset", unique among the report's runs
        for _, metric, what in _LATEX_COLUMNS:
            row = rows.get(metric)
            if row is None:
                cells.append("--")
            elif what == "p":
                cells.append(latex_p(row))
            elif what == "value" and row.get("ci_low") is not None:
                cells.append(f"{latex_number(row['value'])} [{latex_number(row['ci_low'])}, {latex_number(row['ci_high'])}]")
            else:
                cells.append(latex_number(row.get(what)))
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}",
              r"\caption{" + latex_text(legend(report)) + " Metrics of Hoyt et al.\\ (2022).}", r"\end{table}"]
    return "\n".join(lines) + "\n"


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
