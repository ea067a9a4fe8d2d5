"""What several ``kgeval`` commands share: option declarations and the result printers."""

from __future__ import annotations

import click

from ..data.splits import canonical_split
from ..errors import InvalidInputError, KGEvalError
from .grammar import FORMATS


def format_option(*, csv: bool = False):
    """``--format``, declared once for every command: ``table`` (``text`` is its synonym) or ``json``, and
    ``csv`` where the output is the rows of one table (:data:`~.grammar.FORMATS`)."""
    choices = ["table", "text", "json"] + (["csv"] if csv else [])
    return click.option("--format", "fmt", type=click.Choice(choices), default="table", show_default=True,
                        callback=lambda ctx, param, value: "table" if value == "text" else value,
                        help="What to print on stdout: " + "; ".join(f"{c}, {FORMATS[c]}" for c in choices) + ".")


def side_option(what: str):
    """``--side head|tail|both``, declared once: ``what`` begins its help (the rest is the same everywhere)."""
    return click.option("--side", type=click.Choice(["head", "tail", "both"]), default="both", show_default=True,
                        help=f"{what}: head (the head of each triple is ranked), tail, or both (head and tail tasks "
                             "together).")


#: ``--data-dir``, declared once for every command that loads a dataset.
data_dir_option = click.option("--data-dir", type=click.Path(file_okay=False),
                               help="Where large datasets live (else $KGEVAL_DATA).")


def _type_constraints(ctx, param, value):
    """``--type-constraints``: ``train``, or an existing file (made absolute: a saved configuration names it)."""
    if value is None:
        return None
    if value.strip().lower() == "train":
        return "train"
    from pathlib import Path

    path = Path(value).expanduser()
    if not path.is_file():
        raise click.BadParameter(f"{value!r} is neither 'train' nor an existing file")
    return str(path.resolve())


#: ``--type-constraints``, declared once (kgeval evaluate and kgeval pipeline)
type_constraints_option = click.option(
    "--type-constraints", metavar="FILE|train", callback=_type_constraints,
    help="Type-constrained ranking: rank each task against the entities allowed in its position of its relation "
         "only. FILE: OpenKE's type_constrain.txt (ids) or relation<TAB>side<TAB>entity lines (labels or ids); "
         "train: the entities seen in that position in the training split. Answers outside their set are ranked "
         "against the set plus themselves and counted in the header.")


def echo_wrote(path, what: str, fmt: str) -> None:
    """Say what a command wrote and where, after the table; with ``--format json`` the JSON on stdout is the
    whole output (a script parses it), and its ``output`` field says where the file went."""
    if fmt != "json":
        click.echo(f"wrote {path} ({what})")


def echo_above_progress(line: str) -> None:
    """``click.echo`` on stdout while tqdm bars may be drawn on stderr: on a terminal both share the screen, so the
    bars are cleared first and redrawn below the line (a bar's last frame stays out of the line)."""
    from tqdm import tqdm

    with tqdm.external_write_mode():
        click.echo(line)


def nonempty_path(ctx, param, value):
    """A click callback refusing an empty path: ``-o ""`` was taken as no --output (nothing written, or the
    default directory), exit status 0."""
    if value is not None and not str(value).strip():
        raise click.BadParameter("the path is empty")
    return value


def split_list(value: str | None) -> list[str] | None:
    """A comma-separated option value as a list (``None`` stays ``None``)."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise InvalidInputError(f"empty whitelist {value!r}")
    return items


def check_no_filter_validation(no_filter_validation, split: str, *, filtered: bool = True) -> None:
    """``--no-filter-validation`` changes only a filtered evaluation of the test split: elsewhere it was
    accepted and ignored (the validation split is always in its own filter), so it is refused by name."""
    if not no_filter_validation:
        return
    if not filtered:
        raise InvalidInputError("--no-filter-validation has no effect with --unfiltered (nothing is filtered)")
    if canonical_split(split) != "test":
        raise InvalidInputError("--no-filter-validation applies to the test split only: the validation split "
                                "is evaluated with itself and training as the filter")


def count(n: int) -> str:
    return f"{n:,}"


def protocol_lines(results, split: str) -> list[str]:
    """The evaluation protocol as printed by every command: the split, within the protocol's own
    :meth:`~kgeval.protocol.EvaluationProtocol.describe` (one describer for every printer)."""
    split_word = "test" if canonical_split(split) == "test" else "validation"
    lines = results.evaluation_protocol.describe().splitlines()
    if lines and lines[0].startswith("evaluation: "):
        lines[0] = f"evaluation: {split_word} split, " + lines[0][len("evaluation: "):]
    else:
        lines.insert(0, f"evaluation: {split_word} split")
    rank_type = getattr(results, "rank_type", "realistic")
    if rank_type == "realistic":
        return lines + ["table: realistic ranks (ties count half)"]
    return lines + [f"table: {rank_type} ranks, as {results.preset} reports them (kgeval's realistic values: "
                    f"--format json, or keys both.realistic.*)"]


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
    ("p vs chance", "p_inverse_harmonic_mean_rank"),
)


def headline_table(results, rank_type: str | None = None) -> str:
    """Headline metrics, one row each, one column per side (the results' one table renderer); ``rank_type``
    defaults to the results' own (the protocol preset's, else realistic)."""
    from ..results.render import metric_table

    return metric_table(results, [(f"{label} ({key})", key) for label, key in HEADLINE_METRICS],
                        rank_type=rank_type or getattr(results, "rank_type", "realistic"), footer=False)


def metrics_payload(results) -> dict:
    """The headline metrics (realistic ranks, and a protocol preset's rank type, every side) as a flat dict for
    ``--format json``: every value the text table prints, the p-value against chance with its log10 (exact
    where the value underflows)."""
    headline = {}
    types = dict.fromkeys(("realistic", getattr(results, "rank_type", "realistic")))
    for side in results.sides:
        for (_, name), rt in ((h, rt) for rt in types for h in HEADLINE_METRICS):
            names = [name, "log10_" + name] if name.startswith("p_") else [name]
            for key in (f"{side}.{rt}.{n}" for n in names):
                try:
                    headline[key] = results.get_metric(key)
                except KGEvalError:
                    continue
    return headline


def rank_type_callback(allowed: tuple[str, ...] | None = None):
    """A click callback normalising ``--rank-type`` through the key synonyms (``best`` → optimistic,
    ``worst`` → pessimistic, ``avg`` → realistic) and naming close matches for a typo."""
    from ..errors import unknown_name
    from ..keys import RANK_TYPE_SYNONYMS

    def callback(ctx, param, value):
        if value is None:
            return None
        name = RANK_TYPE_SYNONYMS.get(str(value).strip().lower())
        if name is None or (allowed is not None and name not in allowed):
            choices = [k for k, v in RANK_TYPE_SYNONYMS.items() if allowed is None or v in allowed]
            raise click.BadParameter(str(unknown_name("rank type", value, choices)))
        return name

    return callback
