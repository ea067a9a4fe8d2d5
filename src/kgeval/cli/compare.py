"""``kgeval compare RUN_A RUN_B [...]``: the paired comparison table of saved runs.

Each argument is a run directory (``kgeval pipeline``) or a replicate directory
(``kgeval pipeline --replicates K``). The table is :func:`kgeval.compare`'s; ``--format csv``
and ``json`` print it whole, ``text`` a readable selection of its columns.
"""

from __future__ import annotations

import csv
import io
import json
import math

import click

from .._validation import check_probability, check_seed
from ..errors import InvalidInputError
from .breakdown import grouping, grouping_options
from .common import format_option, rank_type_callback, side_option, split_list


@click.command("compare")
@click.argument("runs", nargs=-1, type=click.Path())
@click.option("--metric", "metrics", multiple=True,
              help="Metric to compare (repeatable) [default: mrr, hits@10, mr, gmr].")
@click.option("--test", type=click.Choice(["permutation", "bootstrap", "wilcoxon"]), default="permutation",
              show_default=True, help="Task-level paired test.")
@click.option("--correction", type=click.Choice(["holm", "bh", "none"]), default="holm", show_default=True,
              help="Multiple-testing correction over the table's rows.")
@click.option("--baseline", help="Compare each run against this one (its directory name) instead of all pairs.")
@side_option("The ranking tasks compared")
@click.option("--rank-type", default="realistic", show_default=True,
              callback=rank_type_callback(("optimistic", "pessimistic", "realistic")),
              help="Rank type of the comparison: optimistic (best), pessimistic (worst) or realistic (avg).")
@click.option("--resamples", "num_resamples", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Random sign patterns / bootstrap resamples, at least 2 / (1 - confidence) (40 at 0.95).")
@click.option("--confidence", type=float, default=0.95, show_default=True, help="Level of the intervals, in (0, 1).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the resampling (reproducible tables), in [0, 2**32).")
@grouping_options
@format_option(csv=True)
def command(runs, metrics, test, correction, baseline, side, rank_type, num_resamples, confidence, seed, by, groups,
            splits, threshold, quantiles, data_dir, fmt):
    """Is one run better than another? Paired tests on the same test triples; with --by, per group of tasks
    (relation category, entity frequency, relation, named relation groups), corrected over all groups.

    Example: kgeval compare runs/complex runs/distmult --metric mrr --metric hits@10 --by category
    """
    from ..significance.bootstrap import check_num_resamples
    from ..significance.compare import COLUMNS
    from ..workflow.comparison import compare

    if len(runs) < 2:
        raise InvalidInputError(f"kgeval compare needs at least two run directories, got {len(runs)}")
    # named as the user typed them: compare() names its own arguments ('seed must be ...')
    check_seed("--seed", seed)
    confidence = check_probability("--confidence", confidence)
    check_num_resamples("--resamples", num_resamples, confidence, what="the interval of the difference")
    by = grouping(by, groups, required=False)
    options = {} if by is None else dict(by=by, splits=split_list(splits), threshold=threshold, quantiles=quantiles,
                                         data_dir=data_dir)
    if by is None and (splits is not None or threshold != 1.5 or quantiles != 4 or data_dir is not None):
        raise InvalidInputError("--splits, --threshold, --quantiles and --data-dir shape the groups of --by or "
                                "--group: give one of those")
    table = compare(*runs, metrics=tuple(metrics) or ("mrr", "hits@10", "mr", "gmr"), side=side,
                    rank_type=rank_type, test=test, num_resamples=num_resamples, seed=seed,
                    correction=None if correction == "none" else correction, baseline=baseline,
                    confidence=confidence, **{k: v for k, v in options.items() if v is not None})
    records = table.to_dict("records") if hasattr(table, "to_dict") else table
    records = [{k: _plain(v) for k, v in r.items()} for r in records]
    columns = list(COLUMNS) if by is None else ["group", *COLUMNS]
    if fmt == "json":
        click.echo(json.dumps(records, indent=2))
    elif fmt == "csv":
        from .._escape import csv_text  # a run named "=cmd|..." is no spreadsheet formula

        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n",
                                quoting=csv.QUOTE_NONNUMERIC)  # text quoted: a CR in a name is no row break
        writer.writeheader()
        writer.writerows({k: csv_text(v) if isinstance(v, str) else v for k, v in r.items()} for r in records)
        click.echo(out.getvalue(), nl=False)
    else:
        click.echo(_text(records, side, rank_type, test, correction, confidence))
        if by is not None:
            from ..significance.compare_groups import verdicts

            rule, notes = getattr(table, "attrs", {}).get("rule"), getattr(table, "attrs", {}).get("notes", [])
            click.echo("\n".join(["", f"groups: {rule}", *[f"note: {n}" for n in notes], "",
                                   *verdicts(records)]))


def _plain(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else value


def _num(x, digits: int = 4) -> str:
    from ..results.render import truthful

    if x is None:
        return "-"
    return truthful(f"{x:.{digits}g}" if abs(x) < 1e-3 and x != 0 else f"{x:.{digits}f}", x)


def _text(records, side, rank_type, test, correction, confidence) -> str:
    from .._escape import plain_text  # a newline or ESC in a run name: not a new row or a terminal sequence

    grouped = bool(records) and "group" in records[0]
    head = ("A", "B", "metric", "level", "value A", "value B", "A - B", f"{100 * confidence:g}% CI", "p",
            "p corrected", "effect")
    head = (("group",) if grouped else ()) + head
    rows = [head]
    for r in records:
        better = "higher" if r["higher_is_better"] else "lower"
        group = (plain_text(r["group"]),) if grouped else ()
        rows.append(group + (plain_text(r["model_a"]), plain_text(r["model_b"]),
                             f"{plain_text(r['metric'])} ({better} better)", r["level"],
                     _num(r["value_a"]), _num(r["value_b"]), _num(r["difference"]),
                     f"[{_num(r['ci_low'])}, {_num(r['ci_high'])}]", f"{_num(r['p_value'], 3)} ({r['p_method']})",
                     _num(r["p_corrected"], 3), "-" if r["effect_size"] is None
                     else f"{_num(r['effect_size'], 3)} ({r['effect_kind']})"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    tasks = "head and tail tasks together" if side == "both" else f"{side} tasks only"
    lines += ["", f"side {side}, {rank_type} ranks; task level: paired {test} test over evaluation triples "
              f"({tasks}); run level: Welch t-test over training seeds",
              f"p: two-sided; corrected by {correction} within each level"
              + (" (over the rows of all groups)" if grouped else "") + "; CI: paired bootstrap percentile "
              "interval (task level), Welch t interval of the difference of the run means (run level)"]
    return "\n".join(lines)
