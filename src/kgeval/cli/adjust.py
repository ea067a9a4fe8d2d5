"""``kgeval adjust --dataset NAME metric=value ...``: published numbers against the dataset's null model."""

from __future__ import annotations

import json
import math

import click

from ..errors import InvalidInputError
from .common import check_no_filter_validation, data_dir_option, format_option, side_option
from .grammar import SPLIT


def _parse_pairs(pairs: tuple[str, ...]) -> dict[str, float]:
    """``("mrr=0.356", "mr=177")`` -> ``{"mrr": 0.356, "mr": 177.0}``; a malformed pair is a named error."""
    if not pairs:
        raise InvalidInputError("give at least one metric=value pair, e.g. mrr=0.356 hits@10=0.541 mr=177")
    out: dict[str, float] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise InvalidInputError(f"malformed argument {pair!r}: expected metric=value, e.g. mrr=0.356")
        try:
            value = float(text)
        except ValueError:
            raise InvalidInputError(f"malformed argument {pair!r}: {text!r} is not a number") from None
        if name.strip() in out:
            raise InvalidInputError(f"metric {name.strip()!r} is given twice")
        out[name.strip()] = value
    return out


def _fmt(x) -> str:
    """Every value of the table, z-scores included, as the other tables print them."""
    from ..results.render import format_value

    return format_value(x)


def _table(rows: list[dict]) -> list[str]:
    from ..significance.pvalues import format_p  # scipy: imported by this command only

    header = ["metric", "side", "value", "E[null]", "sd[null]", "adjusted", "z", "p (vs chance)", "p method"]
    cells = [[r["metric"], r["side"], _fmt(r["value"]), _fmt(r["expected_value"]), _fmt(r["std"]),
              _fmt(r["adjusted_index"]), _fmt(r["z"]), format_p(r["log10_p_value"]), r["p_method"]] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(c.ljust(w) if i in (0, 1, 8) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in [header, *cells]]
    return [lines[0], "-" * len(lines[0]), *lines[1:]]


@click.command("adjust")
@click.option("--dataset", "-d", required=True, help="A registered dataset (shipped tables need no files) or a directory.")
@click.argument("values", nargs=-1)
@click.option("--split", type=SPLIT, default="test", show_default=True, help="The split the values were measured on.")
@side_option("The side the values were measured on")
@click.option("--unfiltered", is_flag=True, help="The raw (unfiltered) setting: every entity is a candidate.")
@click.option("--no-filter-validation", is_flag=True, help="Test split: filter training + test only.")
@click.option("--drop-unseen/--keep-unseen", default=False, show_default=True,
              help="Whether test triples with entities unseen in training were dropped (PyKEEN drops them).")
@data_dir_option
@format_option()
def command(dataset, values, split, side, unfiltered, no_filter_validation, drop_unseen, data_dir, fmt):
    """Adjust published metric VALUES (name=value, e.g. mrr=0.356 hits@10=0.541 mr=177) for chance.

    Prints each value's null expectation, adjusted index, z-score and p-value against random
    ranking on the dataset's evaluation, and the protocol the null model assumes.
    """
    from ..significance.adjust import adjust, describe
    from ..significance.null_model import null_model

    parsed = _parse_pairs(values)
    check_no_filter_validation(no_filter_validation, split, filtered=not unfiltered)
    model = null_model(dataset, split, filtered=not unfiltered, filter_validation_when_testing=not no_filter_validation,
                       drop_unseen=drop_unseen, data_dir=data_dir)
    rows = adjust(model, parsed, side=side, as_frame=False)
    if fmt == "json":
        payload = {"dataset": model.dataset, "protocol": model.protocol.to_dict(), "null_model": describe(model),
                   "identity": model.identity, "metrics": [_json_row(r) for r in rows]}
        click.echo(json.dumps(payload, indent=2))
        return
    click.echo(describe(model))
    click.echo(f"tasks: {model.num_tasks(side):,} ({side}); entities: {model.num_entities:,}")
    click.echo("")
    for line in _table(rows):
        click.echo(line)
    click.echo("")
    click.echo("adjusted = (value - E) / (optimum - E): 1 = perfect, 0 = chance; z = (value - E) / sd, larger = better;"
               " p = P(random ranks do at least as well)")


def _json_row(row: dict) -> dict:
    # JSON has no inf/nan; the p-value may underflow to 0 while its logarithm stays finite
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
