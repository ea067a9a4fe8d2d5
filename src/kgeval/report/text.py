"""Text forms of a report: Markdown, LaTeX, CSV (the headline rows of every run) and JSON (all of it).

Numbers are written with :func:`fmt` (4 significant decimals, scientific outside the usual
range); CSV and JSON carry the full ``repr`` precision so that they read back exactly.
"""

from __future__ import annotations

import csv
import io
import json
import math

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
    lines = ["# kgeval report", "", legend(report), "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([run.name, row["side"], row["metric"], *cells(row)]) + " |" for run, row in _rows(report)]
    if report.comparison:
        lines += ["", "## Pairwise comparison", "", comparison_legend(report), "",
                  f"| A | B | metric | value A | value B | A - B | {100 * report.confidence:g}% CI | p (two-sided) "
                  "| p corrected (Holm) |",
                  "|" + "---|" * 9]
        lines += ["| " + " | ".join([r["model_a"], r["model_b"], _with_direction(r), *map(fmt, (
            r["value_a"], r["value_b"], r["difference"])), f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]",
            p_value_text(r["p_value"]), p_value_text(r["p_corrected"])]) + " |" for r in report.comparison]
    for run in report.runs:
        lines += ["", f"## {run.name}", "", "```", run.protocol, "```"]
    if report.notes:
        lines += ["", *(f"- {n}" for n in report.notes)]
    return "\n".join(lines) + "\n"


def _latex_escape(text: str) -> str:
    text = text.replace("\\", "\0")  # escaped last: the other escapes add backslashes
    for a, b in (("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"), ("$", r"\$"), ("{", r"\{"),
                 ("}", r"\}"), ("—", "--")):
        text = text.replace(a, b)
    return text.replace("\0", r"\textbackslash{}")


def render_latex(report) -> str:
    head = [_latex_escape(h) for h in ["run", "side", "metric", *headers(report)]]
    lines = [r"\begin{tabular}{lll" + "r" * len(COLUMNS) + "}", r"\hline",
             " & ".join(head) + r" \\", r"\hline"]
    lines += [" & ".join(_latex_escape(c) for c in [run.name, row["side"], row["metric"], *cells(row)]) + r" \\"
              for run, row in _rows(report)]
    lines += [r"\hline", r"\end{tabular}", f"% {_latex_escape(legend(report))}"]
    return "\n".join(lines) + "\n"


def render_csv(report) -> str:
    fields = ["run", "directory", "side", "metric", "key", "value", "ci_low", "ci_high", "adjusted", "z", "p",
              "log10_p", "p_method"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for run, row in _rows(report):
        writer.writerow({**{k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in row.items()},
                         "run": run.name, "directory": str(run.directory)})
    return buf.getvalue()


def render_json(report) -> str:
    return json.dumps(finite_or_none(report.to_dict()), indent=2, allow_nan=False) + "\n"


RENDERERS = {"md": render_markdown, "latex": render_latex, "csv": render_csv, "json": render_json}
