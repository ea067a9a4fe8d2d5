"""Writing a report: the format chosen here, the page or table rendered by :mod:`.html` or :mod:`.text`.

Apart from :mod:`.model` (the data), so the writers may import the model and the model none of them.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._json import write_atomic
from ..errors import InvalidInputError, unknown_name
from .html import render_html
from .model import FORMATS, Report
from .text import RENDERERS

__all__ = ["write_report"]


def write_report(report: Report, path: str | os.PathLike, *, format: str = "html") -> Path:
    """Write ``report`` to ``path`` in ``format`` (one of :data:`~kgeval.report.model.FORMATS`), atomically.

    Parameters
    ----------
    report : Report
        What :func:`~kgeval.report.build_report` returned.
    path : str or os.PathLike
        The file to write (replaced atomically: a failed write leaves the old file).
    format : str
        ``html`` (one self-contained page) or one of the table formats (``md``, ``latex``, ``csv``, ``json``).

    Returns
    -------
    pathlib.Path
        The file written.

    Examples
    --------
    >>> from kgeval.report import build_report, write_report   # doctest: +SKIP
    >>> write_report(build_report(["runs/distmult"]), "report.md", format="md")  # doctest: +SKIP
    """
    if not isinstance(report, Report):  # was an AttributeError ('NoneType' object has no attribute 'confidence')
        raise InvalidInputError(f"write_report needs a Report (from build_report), got {type(report).__name__}")
    if format not in FORMATS:
        raise unknown_name("report format", format, FORMATS)
    render = render_html if format == "html" else RENDERERS[format]
    return write_atomic(path, render(report))
