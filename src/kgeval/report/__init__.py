"""Reports on saved runs: one self-contained HTML page (figures inline as SVG), or Markdown,
LaTeX, CSV or JSON tables.

- :mod:`.model`: the runs and every number a report shows (:func:`build_report`);
- :mod:`.stats`: confidence intervals, p-values and the pairwise comparison, through the
  significance API where this kgeval has it;
- :mod:`.figures`: the matplotlib figures (Figure 1 of Hoyt et al., 2022, arXiv:2203.07544, on these runs,
  and three per-run views);
- :mod:`.html` and :mod:`.text`: the writers.

``build_report(..., interface="cli")`` writes the notes and the line that remakes the report in the terms of
``kgeval report`` (``--resamples 5000``); the default, ``"python"``, in this function's (``num_resamples=5000``).
"""

from __future__ import annotations

from .model import FORMATS, Report, build_report
from .write import write_report

__all__ = ["FORMATS", "Report", "build_report", "write_report"]
