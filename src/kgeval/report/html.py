"""The HTML report: one self-contained file (inline CSS and SVG figures; no script, no network).

Every number cell carries its exact value for machines beside the rounded text for people:
``<td data-key="both.realistic.inverse_harmonic_mean_rank" data-value="0.4618198551034372">0.4618</td>``
(``data-value`` is Python's ``repr`` of the float, which reads back to the same float).
"""

from __future__ import annotations

from .._escape import html_text as escape
from .._version import __version__
from . import figures
from .text import comparison_legend, fmt, headers, legend, p_text, p_value_text

_CSS = """
body{font-family:sans-serif;margin:2em auto;padding:0 1em;max-width:1300px;color:#222}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:2px 8px;text-align:right;font-size:13px}
th:first-child,td:first-child{text-align:left}
pre{background:#f6f6f6;padding:0.6em;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere}
p{overflow-wrap:anywhere}
figure{margin:0.5em 0;max-width:100%}
figure svg{max-width:100%;height:auto}
.note{color:#a40}
@media (max-width:600px){body{margin:0.5em auto;padding:0 0.5em}th,td{font-size:11px;padding:2px 4px}}
"""

#: the paper whose framework the report follows (Figure 1 is its Figure 1 on these runs)
CITATION = ("Hoyt, C. T., Berrendorf, M., Galkin, M., Tresp, V., & Gyori, B. M. (2022). A Unified Framework for "
            "Rank-based Evaluation Metrics for Link Prediction in Knowledge Graphs. arXiv:2203.07544.")


def _num(value, key: str | None = None, run: str | None = None, text: str | None = None) -> str:
    if value is None:
        return "<td>—</td>"
    attrs = f' data-value="{float(value)!r}"'
    if key:
        attrs += f' data-key="{escape(key)}"'
    if run:
        attrs += f' data-run="{escape(run)}"'
    return f"<td{attrs}>{escape(fmt(value) if text is None else text)}</td>"


def _headline(run, report) -> str:
    out = ["<table class='headline'><tr><th>side</th><th>metric</th>" +
           "".join(f"<th>{escape(h)}</th>" for h in headers(report)) + "</tr>"]
    for row in run.headline:
        ci = ("<td>—</td>" if row["ci_low"] is None else
              f"<td data-low=\"{row['ci_low']!r}\" data-high=\"{row['ci_high']!r}\" data-key=\"{escape(row['key'])}\">"
              f"[{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]</td>")
        p = ("<td>—</td>" if row["p"] is None else
             f"<td data-value=\"{row['p']!r}\" data-key=\"{escape(row['p_key'])}\" data-run=\"{escape(run.name)}\" "
             f"data-log10-value=\"{row['log10_p']!r}\" title=\"{escape(row['p_method'])}\">"
             f"{escape(p_text(row))}</td>")
        out.append(f"<tr><td>{escape(row['side'])}</td><td>{escape(row['metric'])}</td>"
                   f"{_num(row['value'], row['key'], run.name)}{ci}"
                   f"{_num(row['adjusted'], row['adjusted_key'], run.name)}{_num(row['z'], row['z_key'], run.name)}"
                   f"{p}</tr>")
    return "<div class='scroll'>" + "\n".join(out) + "</table></div>"


def _relations(run, metric: str, confidence: float) -> str:
    out = [f"<table class='relations'><tr><th>relation</th><th>tasks</th><th>{escape(metric)}</th>"
           f"<th>{100 * confidence:g}% CI</th>"
           "<th>hits@10</th><th>adjusted index</th></tr>"]
    for r in run.relations:
        ci = "—" if r["ci_low"] is None else f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
        out.append(f"<tr><td>{escape(r['relation'])}</td><td>{escape(r['count'])}</td>{_num(r['value'])}<td>{ci}</td>"
                   f"{_num(r['hits_at_10'])}{_num(r['adjusted'])}</tr>")
    return "<div class='scroll'>" + "\n".join(out) + "</table></div>"


#: the compact comparison table: (header, row field); the constant fields are stated once above it
_PAIR_COLUMNS = (("A", "model_a"), ("B", "model_b"), ("metric", "metric"), ("A", "value_a"), ("B", "value_b"),
                 ("A − B", "difference"), ("CI", "ci"), ("p corrected", "p_corrected"), ("effect", "effect_size"))
_CONSTANT = (("level", "level"), ("test", "test"), ("p-value", "p_method"), ("effect size", "effect_kind"),
             ("evaluation triples", "num_units"))


def _comparison(report) -> str:
    """Model pairs as rows: the difference, its interval, the corrected p-value and the effect size; what
    every row shares (test, level, effect kind, triples) is said once above the table."""
    if not report.comparison:
        return ""
    rows = report.comparison
    constant = [f"{label}: {rows[0][field]}" for label, field in _CONSTANT
                if field in rows[0] and all(r.get(field) == rows[0][field] for r in rows)]
    shown = {field for _, field in _CONSTANT} - {f for label, f in _CONSTANT if f"{label}: " in " ".join(constant)}
    extra = [(label, field) for label, field in _CONSTANT if field in shown]
    head = [f"{100 * report.confidence:g}% CI" if f == "ci" else h for h, f in _PAIR_COLUMNS] + [lb for lb, _ in extra]
    out = [f"<h2>Pairwise comparison</h2><p class='legend'>{escape(comparison_legend(report))}</p>"
           f"<p class='constant'>{escape('; '.join(constant))}</p>"
           "<div class='scroll'><table class='comparison'><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head)
           + "</tr>"]
    for row in rows:
        cells = []
        for _, field in _PAIR_COLUMNS + tuple(extra):
            if field == "ci":
                cells.append(f"<td data-column=\"ci\" data-low=\"{row['ci_low']!r}\" data-high=\"{row['ci_high']!r}\">"
                             f"[{escape(fmt(row['ci_low']))}, {escape(fmt(row['ci_high']))}]</td>")
            elif field == "metric":
                better = "higher" if row.get("higher_is_better") else "lower"
                cells.append(f"<td data-column=\"metric\">{escape(row['metric'])} ({better} better)</td>")
            elif isinstance(row.get(field), float):
                text = p_value_text(row[field]) if field == "p_corrected" else fmt(row[field])
                cells.append(f"<td data-column=\"{field}\" data-value=\"{row[field]!r}\">{escape(text)}</td>")
            else:
                cells.append(f"<td data-column=\"{field}\">{escape(str(row.get(field)))}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(out) + "</table></div>"


def _figure(svg: str, name: str, caption: str) -> str:
    return f"<figure data-figure=\"{escape(name)}\">{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def render_html(report) -> str:
    """The whole page (see the module docstring)."""
    m = report.metric
    body = [f"<h1>kgeval report</h1><p>{len(report.runs)} run(s); kgeval {escape(__version__)}; "
            f"figures and per-relation tables: {escape(m)}; intervals: {100 * report.confidence:g}%.</p>"]
    body.append(_figure(figures.figure_one(report.runs, m), "figure-one",
                        f"{m}, its adjusted index and its z-score per model and dataset: Figure 1 of Hoyt et al. "
                        "(2022) on these runs"))
    body.append(_comparison(report))
    if report.notes:  # warnings below the summary, not above it
        body.append("<h2>Notes</h2>" + "".join(f"<p class='note'>{escape(n)}</p>" for n in report.notes))
    for i, run in enumerate(report.runs):
        body.append(f"<section class='run' data-run=\"{escape(run.name)}\"><h2>{escape(run.name)}</h2>"
                    f"<p class='evaluated'>evaluated on the {escape(run.split)} split of {escape(run.dataset)}</p>"
                    f"<p class='configuration'>trained: {escape(run.configuration)}</p>"
                    f"<p>{escape(str(run.directory))}</p><pre class='protocol'>{escape(run.protocol)}</pre>")
        body.append(f"<p class='legend'>{escape(legend(report))}</p>")
        body.append(_headline(run, report))
        body.append(_figure(figures.rank_distribution(run.results), f"ranks-{i}", "ranks per side against the null model"))
        body.append(_figure(figures.candidates_figure(run.results, m), f"candidates-{i}",
                            f"{m} against the number of candidates"))
        if run.relations:
            body.append(_figure(figures.relation_figure(run.relations, m, report.confidence), f"relations-{i}", f"{m} per relation"))
            body.append(_relations(run, m, report.confidence))
        body.append("</section>")
    body.append(f"<h2>Reference</h2><p class='reference'>{escape(CITATION)}</p>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'><title>kgeval report</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
