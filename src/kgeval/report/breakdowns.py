"""A run's relation-category table in a report: the report metric per category 1-1 / 1-N / N-1 / N-N (Bordes
et al., 2013) and side, with interval, null expectation, adjusted index, z-score and p-value
(:meth:`kgeval.results.Results.breakdown` on the run's rank table and its dataset's training triples).

:func:`category_table` computes it (:mod:`.model` calls it per run); :func:`category_html` and
:func:`category_markdown` write it.
"""

from __future__ import annotations

from .._escape import html_text, markdown_text
from .._format import EMPTY, format_p, format_value
from ..errors import KGEvalError

def headers(confidence: float) -> list[str]:
    """The category table's headers: the interval's level, what the p-value is tested against."""
    return ["category", "side", "tasks", "value", f"{100 * confidence:g}% CI", "E[chance]", "adjusted index", "z",
            "p vs chance"]


def category_table(results, training, metric: str, *, confidence: float, num_resamples: int, seed) -> dict:
    """``{"rule", "rows", "notes", "refused"}`` of a run (rows: one per category with tasks, and side; refused:
    why an interval was refused, for the report's note); empty where the dataset's training triples are not
    at hand or the rank table has no relation column."""
    from ..breakdowns import GroupingData
    from ..results.breakdown import breakdown_of, options

    if training is None or results.rank_table is None or results.rank_table.relation is None:
        return {}
    try:
        table = breakdown_of(results, "category", GroupingData(counted=training, counted_on="the training split"),
                             options([metric], None, "realistic", confidence, num_resamples, seed))
    except KGEvalError as exc:  # a report never fails for want of a breakdown: it says why
        return {"rule": None, "rows": [], "notes": [f"no relation-category table: {exc}"], "refused": []}
    refused = [n for n in table.notes if ": no interval (" in n]
    return {"rule": table.rule, "rows": table.rows, "notes": [n for n in table.notes if n not in refused],
            "refused": refused}


def _cells(row: dict) -> list[str]:
    ci = EMPTY if row["ci_low"] is None else f"[{format_value(row['ci_low'])}, {format_value(row['ci_high'])}]"
    p = EMPTY if row["log10_p"] is None else ("~" if str(row["p_method"]).startswith("normal") else "") + format_p(
        row["log10_p"])
    return [row["group"], row["side"], f"{row['num_tasks']:,}", format_value(row["value"]), ci,
            format_value(row["expected"]), format_value(row["adjusted"]), format_value(row["z"]), p]


def _caption(categories: dict, metric_name: str, confidence: float) -> str:
    notes = "".join(f" {n[0].upper()}{n[1:]}." for n in categories.get("notes", []))
    return (f"{metric_name} per relation category and side. {categories['rule'][0].upper()}{categories['rule'][1:]}."
            f"{notes} E[chance]: the value expected of "
            "random ranks over the category's own candidates; adjusted: (value - E) / (optimum - E); z: "
            f"(value - E) / sd; p: one-sided, against chance (~: normal approximation); CI: {100 * confidence:g}% "
            "BCa bootstrap over the category's evaluation triples.")


def category_html(run, metric_name: str, confidence: float) -> str:
    """The category table of a run as HTML (empty where the run has none)."""
    categories = getattr(run, "categories", None) or {}
    if not categories.get("rows"):
        return ""
    head = "".join(f"<th>{html_text(h)}</th>" for h in headers(confidence))
    body = []
    for row in categories["rows"]:
        cells = _cells(row)
        body.append("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in cells[:3])
                    + f"<td data-value=\"{row['value']!r}\">{html_text(cells[3])}</td>"
                    + "".join(f"<td>{html_text(c)}</td>" for c in cells[4:]) + "</tr>")
    return (f"<h3>{html_text(metric_name)} per relation category</h3>"
            f"<p class='legend'>{html_text(_caption(categories, metric_name, confidence))}</p>"
            f"<div class='scroll'><table class='categories'><tr>{head}</tr>\n" + "\n".join(body) + "</table></div>")


def category_markdown(run, metric_name: str, confidence: float) -> list[str]:
    """The category table of a run as Markdown lines (none where the run has none)."""
    categories = getattr(run, "categories", None) or {}
    if not categories.get("rows"):
        return []
    lines = ["", f"### {markdown_text(metric_name)} per relation category", "",
             markdown_text(_caption(categories, metric_name, confidence)), "",
             "| " + " | ".join(headers(confidence)) + " |", "|" + "---|" * len(headers(confidence))]
    lines += ["| " + " | ".join(markdown_text(c) for c in _cells(row)) + " |" for row in categories["rows"]]
    return lines
