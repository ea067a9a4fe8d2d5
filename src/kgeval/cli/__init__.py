"""The ``kgeval`` command: one click group, one error path, one module per command.

- ``kgeval metrics FILE``: every metric from a rank file (:mod:`.metrics`);
- ``kgeval pipeline``: train, evaluate, save a run (:mod:`.pipeline`);
- ``kgeval evaluate``: re-evaluate a saved run (:mod:`.evaluate`);
- ``kgeval datasets``: the known datasets (:mod:`.datasets`);
- ``kgeval hpo``: hyper-parameter search (:mod:`.hpo`);
- ``kgeval report``: a report on saved runs (:mod:`.report`);
- ``kgeval compare``: paired comparison of saved runs, also per group of tasks (:mod:`.compare`);
- ``kgeval breakdown``: a run's metrics per group of tasks (:mod:`.breakdown`);
- ``kgeval adjust``: published numbers against a dataset's null model (:mod:`.adjust`);
- ``kgeval explain``: why two evaluations' numbers differ (:mod:`.explain`);
- ``kgeval diagnose``: unseen entities, leakage and suspicious relations of a dataset (:mod:`.diagnose`).

Errors are handled once, in :class:`_Group`: kgeval's own errors and file-system errors
print ``error: <message>`` on stderr and exit with status 2, never a traceback; output
piped into a closed reader (``| head``) exits quietly; Ctrl-C is click's clean ``Aborted!``.
"""

from __future__ import annotations

import os
import sys

import click

from .._version import __version__
from ..errors import KGEvalError
from .grammar import cli_terms, did_you_mean, rewrite_deprecated


def _quiet_broken_pipe() -> None:
    # stdout's reader is gone: point stdout at /dev/null so the interpreter's final flush
    # does not print a second "Exception ignored ... BrokenPipeError" message
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (CliRunner)
        pass


class _Group(click.Group):
    """Turns kgeval's errors and OS errors into one line on stderr and exit status 2; rewrites deprecated
    option spellings and suggests kgeval's for PyKEEN's (:mod:`.grammar`)."""

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        return name, command, rewrite_deprecated(name, rest) if name else rest

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:
            raise did_you_mean(exc) from None
        except BrokenPipeError:
            _quiet_broken_pipe()
            sys.exit(1)
        except (KGEvalError, OSError) as exc:
            click.echo(f"error: {cli_terms(str(exc))}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(version=__version__, prog_name="kgeval")
def main():
    """kgeval: exact, fast, comparable rank-based evaluation of link prediction."""


def _register() -> None:
    from . import adjust, breakdown, compare, datasets, diagnose, evaluate, explain, hpo, metrics, pipeline, report

    for module in (metrics, pipeline, evaluate, datasets, diagnose, hpo, report, compare, breakdown, adjust, explain):
        main.add_command(module.command)


_register()
