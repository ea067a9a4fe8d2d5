"""What several ``kgeval`` commands share: option declarations and the result printers."""

from __future__ import annotations

import click

from ..data.splits import canonical_split
from ..errors import InvalidInputError, KGEvalError

#: ``--format table|json``, declared once for every command.
format_option = click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                             show_default=True)
#: ``--data-dir``, declared once for every command that loads a dataset.
data_dir_option = click.option("--data-dir", type=click.Path(file_okay=False),
                               help="Where large datasets live (else $KGEVAL_DATA).")


def split_list(value: str | None) -> list[str] | None:
    """A comma-separated option value as a list (``None`` stays ``None``)."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise InvalidInputError(f"empty whitelist {value!r}")
    return items


def count(n: int) -> str:
    return f"{n:,}"


def describe_filtering(dataset, split: str, filter_validation_when_testing: bool) -> str:
    """The filter sets of an evaluation, spelled out with their sizes."""
    if canonical_split(split) == "test":
        parts = [f"training ({count(len(dataset.training))})"]
        if filter_validation_when_testing:
            parts.append(f"validation ({count(len(dataset.validation))})")
        parts.append(f"test ({count(len(dataset.testing))}, the evaluation triples)")
    else:
        parts = [f"training ({count(len(dataset.training))})",
                 f"validation ({count(len(dataset.validation))}, the evaluation triples)"]
    return " + ".join(parts)


def protocol_lines(results, dataset, split: str, filter_validation_when_testing: bool, whitelist) -> list[str]:
    """The evaluation protocol in a few human-readable lines."""
    p = results.protocol or {}
    split = canonical_split(split)
    split_word = "test" if split == "test" else "validation"
    lines = [
        f"evaluation: {split_word} split, {count(p.get('num_evaluated_triples', p.get('num_triples', 0)))} triples, "
        f"sides {' + '.join(p.get('sides', []))} ({count(p.get('num_tasks', 0))} ranking tasks), "
        + (f"the {len(whitelist['entities'])} whitelisted entities as candidates" if whitelist.get("entities")
           else f"all {count(dataset.num_entities)} entities as candidates"),
        f"filtered: {describe_filtering(dataset, split, filter_validation_when_testing)}",
        "rank type: realistic (mean of optimistic and pessimistic ranks: ties count half)",
    ]
    r, e = whitelist.get("relations"), whitelist.get("entities")
    if r or e:
        lines.append("whitelist: " + ", ".join(x for x in [f"{len(r)} relations" if r else "",
                                                           f"{len(e)} entities" if e else ""] if x))
    return lines


#: The headline metrics of the workflow commands: (label, metric key).
HEADLINE_METRICS = (
    ("MRR", "inverse_harmonic_mean_rank"),
    ("Hits@1", "hits_at_1"),
    ("Hits@3", "hits_at_3"),
    ("Hits@10", "hits_at_10"),
    ("MR", "arithmetic_mean_rank"),
    ("AMRI", "adjusted_arithmetic_mean_rank_index"),
    ("adjusted MRR", "adjusted_inverse_harmonic_mean_rank"),
    ("z-MRR", "z_inverse_harmonic_mean_rank"),
)


def headline_table(results, rank_type: str = "realistic") -> str:
    """Headline metrics, one row each, one column per side (the results' one table renderer)."""
    from ..results.render import metric_table

    return metric_table(results, [(f"{label} ({key})", key) for label, key in HEADLINE_METRICS],
                        rank_type=rank_type, footer=False)


def metrics_payload(results) -> dict:
    """The headline metrics (realistic ranks, every side) as a flat dict for ``--format json``."""
    headline = {}
    for side in results.sides:
        for _, name in HEADLINE_METRICS:
            key = f"{side}.realistic.{name}"
            try:
                headline[key] = results.get_metric(key)
            except KGEvalError:
                continue
    return headline
