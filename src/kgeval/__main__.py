"""``python -m kgeval``: the ``kgeval`` command."""

from kgeval.cli import main

main(prog_name="kgeval")
