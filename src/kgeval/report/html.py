"""The HTML report: one self-contained file (inline CSS and SVG figures; no script, no network).

The page reads top-down as a paper's appendix: the summary (every run's headline metrics, models as rows
grouped by dataset, and Figure 1), the pairwise comparison (model pairs as rows, what every row shares said
once above it), the notes (below the summary, in the terms of the interface that made the report), then
each run: what was evaluated and how it was trained, its headline table, figures, per-relation table and
worst-ranked tasks, labelled; the reference last. Wide tables scroll inside their box and wide figures
keep a legible width and scroll, so the page itself never overflows, from a desktop down to a phone.

Every number cell carries its exact value for machines beside the rounded text for people:
``<td data-key="both.realistic.inverse_harmonic_mean_rank" data-value="0.4618198551034372">0.4618</td>``
(``data-value`` is Python's ``repr`` of the float, which reads back to the same float).
"""

from __future__ import annotations

import re

from .._escape import html_text as escape
from .._version import __version__
from . import figures
from .breakdowns import category_html
from .model import base_metric, short_name
from .text import (BIBTEX, CITATION, SUMMARY_COLUMNS, comparison_groups, comparison_layout, comparison_legend,
                   effect_header, fmt, headers, legend, notes_heading, p_text, p_value_text, pair_label, remake_line,
                   setting_text, summary_rows)

_CSS = """
html{-webkit-text-size-adjust:100%}
body{font-family:sans-serif;margin:2em auto;padding:0 1em;max-width:1300px;color:#222;line-height:1.4}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:2px 8px;text-align:right;font-size:13px;vertical-align:top;white-space:nowrap}
th.text,td.text,th:first-child,td:first-child{text-align:left}
tr.group th{background:#f3f3f3;text-align:left;font-weight:bold}
td small{color:#555;white-space:nowrap}
table.setup th{font-weight:normal;color:#555;white-space:nowrap}
table.setup td{text-align:left;white-space:normal}
pre{background:#f6f6f6;padding:0.6em;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere}
h1,h2,h3,p,li,figcaption,code,table.setup td{overflow-wrap:anywhere}
figure{margin:0.5em 0 1.5em;max-width:100%}
figure svg{max-width:100%;height:auto;display:block}
figcaption{font-size:13px;color:#444}
.swatch{display:inline-block;width:0.8em;height:0.8em;margin-right:0.3em;border-radius:2px;vertical-align:baseline}
.note{color:#a40}
details{margin:0.5em 0}
footer{margin-top:2em;font-size:12px;color:#555}
@media (max-width:600px){body{margin:0.5em auto;padding:0 0.5em}th,td{font-size:11px;padding:2px 4px}
h1{font-size:1.5em}h2{font-size:1.25em}}
"""

#: figures wider than a phone: drawn at least this wide (px) and scrolled in their box, not shrunk to
#: an unreadable size (a figure narrower than the page is scaled down to fit it)
_MIN_WIDTH = {"figure-one": 720, "ranks": 560}


def _num(value, key: str | None = None, run: str | None = None, text: str | None = None, small: str = "") -> str:
    if value is None:
        return "<td>—</td>"
    attrs = f' data-value="{float(value)!r}"'
    if key:
        attrs += f' data-key="{escape(key)}"'
    if run:
        attrs += f' data-run="{escape(run)}"'
    return f"<td{attrs}>{escape(fmt(value) if text is None else text)}{small}</td>"


def _p_cell(row: dict, run_name: str) -> str:
    if row["p"] is None:
        return "<td>—</td>"
    return (f"<td data-value=\"{row['p']!r}\" data-key=\"{escape(row['p_key'])}\" data-run=\"{escape(run_name)}\" "
            f"data-log10-value=\"{row['log10_p']!r}\" title=\"{escape(row['p_method'])}\">{escape(p_text(row))}</td>")


def _swatch(label: str) -> str:
    """The model's colour (the one of its bars in Figure 1, the same in every report) before its name."""
    return f"<span class='swatch' style='background:{figures.model_colour(label)}'></span>"


def _headline(run, report) -> str:
    out = ["<table class='headline'><tr><th>side</th><th>metric</th>" +
           "".join(f"<th>{escape(h)}</th>" for h in headers(report)) + "</tr>"]
    for row in run.headline:
        ci = ("<td>—</td>" if row["ci_low"] is None else
              f"<td data-low=\"{row['ci_low']!r}\" data-high=\"{row['ci_high']!r}\" data-key=\"{escape(row['key'])}\">"
              f"[{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]</td>")
        out.append(f"<tr><td>{escape(row['side'])}</td><td>{escape(row['metric'])}</td>"
                   f"{_num(row['value'], row['key'], run.name)}{ci}"
                   f"{_num(row['adjusted'], row['adjusted_key'], run.name)}{_num(row['z'], row['z_key'], run.name)}"
                   f"{_p_cell(row, run.name)}</tr>")
    return "<div class='scroll'>" + "\n".join(out) + "</table></div>"


def _summary(report) -> str:
    """Every run's headline (both sides): models as rows, grouped by dataset, metrics as columns, each value
    with its interval beneath it."""
    what = {"value": "", "adjusted": "adjusted_key", "z": "z_key"}
    width = 1 + len(SUMMARY_COLUMNS)
    out = ["<div class='scroll'><table class='summary'><tr><th>model</th>"
           + "".join(f"<th>{escape(h)}</th>" for h, _, _ in SUMMARY_COLUMNS) + "</tr>"]
    for dataset, runs in report.grouped():
        out.append(f"<tr class='group'><th colspan='{width}'>{escape(_group_text(dataset, runs))}</th></tr>")
        for run in runs:
            rows = summary_rows(run)
            cells = [f"<td class='text'>{_swatch(run.label)}{escape(run.label)}</td>"]
            for _, metric, column in SUMMARY_COLUMNS:
                row = rows.get(metric)
                if row is None:
                    cells.append("<td>—</td>")
                elif column == "p":
                    cells.append(_p_cell(row, run.name))
                elif column == "value":
                    small = ("" if row.get("ci_low") is None else
                             f"<br><small data-low=\"{row['ci_low']!r}\" data-high=\"{row['ci_high']!r}\">"
                             f"[{escape(fmt(row['ci_low']))}, {escape(fmt(row['ci_high']))}]</small>")
                    cells.append(_num(row["value"], row["key"], run.name, small=small))
                else:
                    cells.append(_num(row[column], row[what[column]], run.name))
            out.append(f"<tr data-run=\"{escape(run.name)}\">" + "".join(cells) + "</tr>")
    return "\n".join(out) + "</table></div>"


def _group_text(dataset, runs) -> str:
    """``Nations: test split, 201 triples, filtered`` (what the dataset's runs share)."""
    said = [f"{runs[0].split} split" if len({r.split for r in runs}) == 1 else "splits differ (see each run)"]
    sizes = {r.results.protocol.get("num_evaluated_triples") or r.results.protocol.get("num_triples") for r in runs}
    if len(sizes) == 1 and None not in sizes:
        said.append(f"{next(iter(sizes)):,} evaluation triples")
    filtered = {bool(r.results.protocol.get("filtered")) for r in runs}
    said.append({frozenset({True}): "filtered", frozenset({False}): "raw (unfiltered)"}.get(frozenset(filtered),
                                                                                          "filtered and raw runs"))
    return f"{dataset}: " + ", ".join(said)


def _relations(run, metric: str, confidence: float) -> str:
    name = short_name(base_metric(metric))
    out = [f"<table class='relations'><tr><th>relation</th><th>tasks</th><th>{escape(name)}</th>"
           f"<th>{100 * confidence:g}% CI</th>"
           "<th>hits@10</th><th>adjusted index</th></tr>"]
    for r in sorted(run.relations, key=lambda r: _natural(r["relation"])):  # term2 before term10
        ci = "—" if r["ci_low"] is None else f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
        out.append(f"<tr><td>{escape(r['relation'])}</td><td>{escape(r['count'])}</td>{_num(r['value'])}<td>{ci}</td>"
                   f"{_num(r['hits_at_10'])}{_num(r['adjusted'])}</tr>")
    return "<div class='scroll'>" + "\n".join(out) + "</table></div>"


def _natural(text: str) -> list:
    """A sort key that orders the numbers in a label by value: ``term2`` before ``term10``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part.lower())
            for part in re.split(r"(\d+)", str(text)) if part]


def _examples(run) -> str:
    """The worst-ranked tasks, as labelled triples; the entity that was ranked in bold."""
    if not run.examples:
        return ""
    out = [f"<h3>The {len(run.examples)} worst-ranked tasks</h3><p class='legend'>Evaluation triples of the "
           f"{escape(run.split)} split, by realistic rank relative to the number of candidates; the entity the model "
           "ranked in bold.</p><div class='scroll'><table class='examples'><tr><th class='text'>head</th>"
           "<th class='text'>relation</th><th class='text'>tail</th><th>rank</th><th>candidates</th></tr>"]
    for ex in run.examples:
        head, tail = (f"<strong>{escape(ex[k])}</strong>" if ex["side"] == k else escape(ex[k])
                      for k in ("head", "tail"))
        out.append(f"<tr><td class='text'>{head}</td><td class='text'>{escape(ex['relation'])}</td>"
                   f"<td class='text'>{tail}</td>{_num(ex['rank'], text=format(ex['rank'], 'g'))}"
                   f"<td>{ex['num_candidates']:,}</td></tr>")
    return "\n".join(out) + "</table></div>"


def _setup(run) -> str:
    """What was evaluated and how the model was trained, as a methods section states it."""
    rows = [*run.setup, ("directory", str(run.directory))]
    return ("<div class='scroll'><table class='setup'>" + "".join(
        f"<tr data-setup=\"{escape(what)}\"><th>{escape(what)}</th><td>{escape(text)}</td></tr>" for what, text in rows)
        + "</table></div>")


#: the compact comparison table: (header, row field); the settings every row shares are stated once above it
_PAIR_COLUMNS = (("A", "model_a"), ("B", "model_b"), ("metric", "metric"), ("value A", "value_a"),
                 ("value B", "value_b"), ("A − B", "difference"), ("CI", "ci"), ("p (Holm)", "p_corrected"),
                 ("effect", "effect_size"))


def _comparison(report) -> str:
    """Model pairs as rows, grouped by dataset: the difference, its interval, the corrected p-value and the
    effect size; what every row shares (test, p-values, effect kind) is said once above the table, what a
    dataset's rows share (its number of triples) in its group's header row."""
    if not report.comparison:
        return ""
    settled, per_group, extra = comparison_layout(report)
    head = [f"{100 * report.confidence:g}% CI" if f == "ci" else effect_header(report) if f == "effect_size" else h
            for h, f in _PAIR_COLUMNS] + [h for h, _ in extra]
    width = len(head)
    out = [f"<h2>Pairwise comparison</h2><p class='legend'>{escape(comparison_legend(report))}</p>"
           + (f"<p class='constant'>All rows: {escape('; '.join(settled))}.</p>" if settled else "")
           + "<div class='scroll'><table class='comparison'><tr>"
           + "".join(f"<th{' class=text' if i < 3 else ''}>{escape(h)}</th>" for i, h in enumerate(head)) + "</tr>"]
    for dataset, rows in comparison_groups(report):
        out.append(f"<tr class='group'><th colspan='{width}'>{escape(dataset)}"
                   + (f": {escape('; '.join(per_group[dataset]))}" if per_group.get(dataset) else "") + "</th></tr>")
        for row in rows:
            cells = []
            for _, field in _PAIR_COLUMNS + tuple(extra):
                if field == "ci":
                    cells.append(f"<td data-column=\"ci\" data-low=\"{row['ci_low']!r}\" "
                                 f"data-high=\"{row['ci_high']!r}\">"
                                 f"[{escape(fmt(row['ci_low']))}, {escape(fmt(row['ci_high']))}]</td>")
                elif field in ("model_a", "model_b"):
                    label = pair_label(report, row[field])
                    cells.append(f"<td class='text' data-column=\"{field}\" data-name=\"{escape(row[field])}\">"
                                 f"{_swatch(label)}{escape(label)}</td>")
                elif field == "metric":
                    better = "higher" if row.get("higher_is_better") else "lower"
                    cells.append(f"<td class='text' data-column=\"metric\">{escape(row['metric'])} "
                                 f"<small>({better} better)</small></td>")
                elif isinstance(row.get(field), float):
                    text = p_value_text(row[field]) if field == "p_corrected" else fmt(row[field])
                    cells.append(f"<td data-column=\"{field}\" data-value=\"{row[field]!r}\">{escape(text)}</td>")
                else:
                    cells.append(f"<td data-column=\"{field}\">{escape(setting_text(field, row.get(field)))}</td>")
            out.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(out) + "</table></div>"


def _figure(svg: str, name: str, caption: str) -> str:
    kind = name if name in _MIN_WIDTH else name.rsplit("-", 1)[0]
    inner = svg if kind not in _MIN_WIDTH else f"<div style='min-width:{_MIN_WIDTH[kind]}px'>{svg}</div>"
    return (f"<figure data-figure=\"{escape(name)}\"><div class='scroll'>{inner}</div>"
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def _diagnostics(report) -> str:
    """Each dataset's diagnostics (unseen entities, leakage), one verdict per finding, above every number."""
    if not report.diagnostics:
        return ""
    parts = ["<h2>Datasets</h2>"]
    for dataset, findings in report.diagnostics.items():
        parts.append(f"<p class='legend'>{escape(dataset)} (kgeval diagnose):</p><ul class='diagnostics'>"
                     + "".join(f"<li>{escape(f)}</li>" for f in findings) + "</ul>")
    return "".join(parts)


def render_html(report) -> str:
    """The whole page (see the module docstring)."""
    m = report.metric
    metric = base_metric(m)
    datasets = report.datasets()
    body = [f"<h1>kgeval report</h1><p class='lede'>{len(report.runs)} run(s) on {len(datasets)} dataset(s) "
            f"({escape(', '.join(map(str, datasets)))}); kgeval {escape(__version__)}. Figures and per-relation "
            f"tables: {escape(short_name(metric))} ({escape(m)}); intervals: {100 * report.confidence:g}%. Metrics as "
            "in Hoyt et al. (2022), see the reference below.</p>",
            _diagnostics(report),
            "<h2>Summary</h2><p class='legend'>Both sides (head and tail prediction), realistic ranks (ties count "
            f"half); beneath each value its {100 * report.confidence:g}% BCa bootstrap interval over evaluation "
            "triples; adjusted MRR: (M - E[M]) / (optimum - E[M]), 0 = chance, 1 = perfect; z: (M - E[M]) / sd[M]; "
            "p: one-sided, P(random ranks do at least as well).</p>",
            _summary(report)]
    body.append(_figure(figures.figure_one(report.runs, m), "figure-one",
                        f"{short_name(metric)} ({m}), its adjusted index and its z-score per model and dataset: "
                        "Figure 1 of Hoyt et al. (2022) on these runs"))
    body.append(_comparison(report))
    if report.notes:  # warnings below the summary, not above it
        body.append(f"<h2>{escape(notes_heading(report))}</h2>"
                    + "".join(f"<p class='note'>{escape(n)}</p>" for n in report.notes))
    for i, run in enumerate(report.runs):
        body.append(f"<section class='run' data-run=\"{escape(run.name)}\">"
                    f"<h2>{_swatch(run.label)}{escape(run.name)}</h2>"
                    f"{_setup(run)}<details><summary>evaluation protocol in full</summary>"
                    f"<pre class='protocol'>{escape(run.protocol)}</pre></details>")
        body.append(f"<p class='legend'>{escape(legend(report))}</p>")
        body.append(_headline(run, report))
        body.append(_figure(figures.rank_distribution(run.results, run.label), f"ranks-{i}",
                            "ranks per side against the null model"))
        body.append(_figure(figures.candidates_figure(run.results, m, run.label), f"candidates-{i}",
                            f"{short_name(metric)} against the number of candidates"))
        if run.relations:
            body.append(_figure(figures.relation_figure(run.relations, m, report.confidence, run.label),
                                f"relations-{i}", f"{short_name(metric)} per relation"))
            body.append(_relations(run, m, report.confidence))
        body.append(category_html(run, short_name(metric), report.confidence))
        body.append(_examples(run))
        body.append("</section>")
    body.append(f"<h2>Reference</h2><p class='reference'>{escape(CITATION)}</p>"
                f"<details><summary>BibTeX</summary><pre class='bibtex'>{escape(BIBTEX)}</pre></details>")
    body.append(f"<footer><p class='remake'>Made with kgeval {escape(__version__)}: <code>{escape(remake_line(report))}"
                "</code></p></footer>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'><title>kgeval report</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
