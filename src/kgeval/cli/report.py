"""``kgeval report RUN_DIR [RUN_DIR ...] -o FILE``: a report on saved runs (see :mod:`kgeval.report`)."""

from __future__ import annotations

from pathlib import Path

import click

from .grammar import cli_terms

#: ``-o`` suffix -> report format, when ``--format`` is not given.
SUFFIX_FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".tex": "latex",
                  ".latex": "latex", ".csv": "csv", ".json": "json"}


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=True, dir_okay=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The report file to write; its suffix chooses the format unless --format is given.")
@click.option("--format", "fmt", type=click.Choice(["html", "md", "latex", "csv", "json"]),
              help="The report's format [default: from the --output suffix (.html, .md, .tex/.latex, .csv, "
                   ".json), else html].")
@click.option("--metric", default="mrr", show_default=True, help="The metric of the figures and per-relation tables.")
@click.option("--confidence", default=0.95, show_default=True, type=float, help="Confidence of the intervals, in (0, 1).")
@click.option("--resamples", default=1000, show_default=True, type=click.IntRange(min=1),
              help="Bootstrap (BCa) resamples per interval, at least 10 / (1 - confidence) (200 at 0.95).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the resampling, in [0, 2**32).")
def command(runs, output, fmt, metric, confidence, resamples, seed):
    """Write a report on saved runs: protocol, headline metrics with CIs, adjusted values, z, p,
    per-side and per-relation tables, the pairwise comparison and figures (HTML: one file)."""
    from .._validation import check_probability, check_seed
    from ..report import build_report, write_report
    from ..significance.bootstrap import check_num_resamples
    from ..workflow.runs import check_output_file

    # named as the user typed them, and before any work. build_report names its own arguments
    # ('confidence must be ...'), and a bad seed made every interval cell empty without a word
    check_seed("--seed", seed)
    confidence = check_probability("--confidence", confidence)
    check_num_resamples("--resamples", resamples, confidence, "bca")

    # an HTML report was written into report.md (the format did not follow the name)
    fmt = fmt or SUFFIX_FORMATS.get(Path(output).suffix.lower(), "html")
    # before the work: a missing directory was an error naming a temporary file, after building the report
    target = check_output_file(output, inputs=runs)  # never one of the runs' own files
    replaced = target.exists()
    if fmt == "html":  # its figures need the metric's z-score: say so before the bootstrap, not after
        from ..report.model import base_metric, derived_keys

        derived_keys(base_metric(metric))
    report = build_report(runs, metric=metric, confidence=confidence, num_resamples=resamples, seed=seed,
                          interface="cli")
    # build_report wrote the notes in the report options' CLI terms; cli_terms rewrites what other modules said
    # in Python's terms (an argument of evaluate named in a run's refusal)
    report.notes = [cli_terms(note) for note in report.notes]
    path = write_report(report, output, format=fmt)
    click.echo(f"wrote {path} ({fmt}, {len(report.runs)} run(s))" + ("; it replaced the existing file" if replaced else ""))
