"""The one grammar of the ``kgeval`` command line: what an option spelling means in every command.

- **Shared options** mean the same in every command that has them (``-d/--dataset``, ``-m/--model``,
  ``-o/--output``, ``--metric``, ``--format``, ``--resamples``, ``--seed``, ``--progress``); the
  test ``tests/cli/test_grammar.py`` walks every command and checks their names, types and defaults.
- **Old spellings** keep working for a deprecation period (:data:`DEPRECATED`): the group rewrites them
  before the command parses its arguments and prints one ``warning:`` line on stderr.
- **PyKEEN's spellings** of the pipeline options get a "did you mean" (:data:`PYKEEN_SPELLINGS`).
- **Progress** defaults to on when stderr is a terminal and off in pipes (:func:`progress_enabled`).
"""

from __future__ import annotations

import re
import sys

import click

#: ``--format``: what a command prints on stdout, one meaning in every command; ``csv`` only where the output is
#: rows of one table (``kgeval report --format`` names a file format instead: html, md, latex, csv, json)
FORMATS = {"table": "the readable output", "text": "the same as table", "json": "one JSON document, the whole output",
           "csv": "the table's rows as CSV"}

#: command -> {old spelling: the spelling that replaces it}
DEPRECATED = {
    "metrics": {"-m": "--metric"},  # -m is --model everywhere else
    "compare": {"--num-resamples": "--resamples"},
}

#: PyKEEN's pipeline option names -> kgeval's (``kgeval pipeline`` / ``kgeval hpo``)
PYKEEN_SPELLINGS = {
    "--embedding-dim": "--dim", "--learning-rate": "--lr", "--training-loop": "--loop",
    "--num-epochs": "--epochs", "--random-seed": "--seed", "--negatives": "--num-negatives",
}

#: The ``kgeval pipeline`` options that set one configuration path each (``kgeval hpo`` prints them back, and
#: suggests ``--set PATH=VALUE`` for the PyKEEN spelling of one it does not have).
OPTION_PATHS = {"dim": "model.dim", "epochs": "training.epochs", "lr": "optimizer.lr",
                "batch_size": "training.batch_size", "num_negatives": "training.num_negatives",
                "loop": "training.loop", "seed": "seed", "threads": "threads",
                "patience": "early_stopping.patience", "frequency": "early_stopping.frequency",
                "stopping_metric": "early_stopping.metric", "filtered_with_test": "early_stopping.filtered_with_test"}

#: Python argument names in kgeval's messages -> the option a CLI user types (translated once, at the
#: CLI boundary: the Python API keeps naming its arguments)
PYTHON_TO_CLI = (
    (re.compile(r"\bdata_dir="), "--data-dir"), (re.compile(r"\bnum_resamples\b"), "--resamples"),
    (re.compile(r"\brandom_seed\b"), "--seed"), (re.compile(r"\bn_trials\b"), "--trials"),
    (re.compile(r"\bstudy_name\b"), "--study-name"), (re.compile(r"\boutput_dir\b"), "--output"),
    # kgeval report draws BCa intervals only: the Python API's other method is no remedy on the command line
    (re.compile(r"(;| or) use method='percentile'"), ""),
)


def cli_terms(message: str) -> str:
    """A kgeval error message with the Python argument names it mentions spelled as CLI options."""
    for pattern, option in PYTHON_TO_CLI:
        message = pattern.sub(option, message)
    return message


#: ``--progress/--no-progress``, declared once
progress_option = click.option(
    "--progress/--no-progress", default=None,
    help="Show progress on stderr (training epochs and loss, runs, trials) [default: on when stderr is a terminal].")


def progress_enabled(value: bool | None) -> bool:
    """The ``--progress`` flag as given, else whether stderr is a terminal (silent in pipes and files)."""
    if value is not None:
        return value
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def rewrite_deprecated(command: str, args: list[str]) -> list[str]:
    """``args`` of ``command`` with every deprecated spelling replaced, one warning line per spelling."""
    table = DEPRECATED.get(command, {})
    out, warned = [], set()
    for i, arg in enumerate(args):
        if arg == "--":  # everything after it is an argument, not an option
            return out + args[i:]
        if not isinstance(arg, str):  # a path object given to main() from Python: never an option name
            out.append(arg)
            continue
        name, sep, value = arg.partition("=")
        if name in table:
            if name not in warned:
                click.echo(f"warning: {name} is deprecated in kgeval {command}; use {table[name]}", err=True)
                warned.add(name)
            arg = table[name] + sep + value
        out.append(arg)
    return out


def did_you_mean(exc: click.NoSuchOption) -> click.NoSuchOption:
    """A PyKEEN spelling gets kgeval's as its suggestion (click's own guess stays for other typos); in a command
    without kgeval's option but with ``--set`` (``kgeval hpo``), the configuration path it sets."""
    name = exc.option_name.partition("=")[0]
    if name in PYKEEN_SPELLINGS and exc.ctx is not None:
        known = {opt for p in exc.ctx.command.params for opt in getattr(p, "opts", [])}
        ours = PYKEEN_SPELLINGS[name]
        path = OPTION_PATHS.get(ours[2:].replace("-", "_"))
        suggestion = ours if ours in known else f"--set {path}=VALUE" if path and "--set" in known else None
        if suggestion is not None:
            new = click.NoSuchOption(name, ctx=exc.ctx)
            new.possibilities = [suggestion]  # click keeps only difflib's close matches
            return new
    return exc


class SplitType(click.ParamType):
    """An evaluation split, ``test`` or ``valid``, in any spelling kgeval accepts (``validation``, ``Test``)."""

    name = "split"

    def get_metavar(self, param, ctx=None):
        return "[test|valid]"

    def convert(self, value, param, ctx):
        from ..data.splits import canonical_split
        from ..errors import KGEvalError, InvalidInputError

        try:
            split = canonical_split(value)
        except InvalidInputError:
            split = None
        if split not in ("test", "valid"):
            self.fail(f"{value!r} is not an evaluation split: test or valid", param, ctx)
        return split


SPLIT = SplitType()


def _protocol_callback(ctx, param, value):
    """``--protocol``: a preset name of :mod:`kgeval.presets` (any case), a close match named for a typo."""
    if value is None:
        return None
    from .. import presets
    from ..errors import UnknownNameError

    try:
        return presets.get(value).name
    except UnknownNameError as exc:
        raise click.BadParameter(str(exc)) from None


#: ``--protocol NAME``, declared once (``kgeval evaluate``, ``kgeval pipeline``)
protocol_option = click.option(
    "--protocol", metavar="NAME", callback=_protocol_callback,
    help="A tool's evaluation protocol: kgeval (default), pykeen, libkge, torchkge, ogb, ampligraph, dglke, pbg or "
         "graphvite. Sets its tie rule and tolerance, NaN rule, filter sets per split and unseen-triple handling; the "
         "table shows its rank type (LibKGE: rounded mean rank, TorchKGE: pessimistic), kgeval's realistic "
         "values stay in --format json.")



def _sides_callback(ctx, param, value):
    if value is None:
        return None
    from ..errors import KGEvalError
    from ..evaluation.options import EvaluationOptions

    parts = [p.strip() for p in str(value).split(",") if p.strip()]
    try:
        return EvaluationOptions(sides=tuple(parts) if len(parts) != 1 else parts[0]).sides
    except KGEvalError as exc:
        raise click.BadParameter(str(exc)) from None


#: ``--sides head,tail,relation``, declared once (``kgeval evaluate``, ``kgeval pipeline``)
sides_option = click.option(
    "--sides", metavar="LIST", callback=_sides_callback,
    help="The ranking tasks, comma-separated: head, tail (both = head,tail) and relation (relation prediction: "
         "(h, ?, t) ranks the true relation among all relations) [default: head,tail].")

