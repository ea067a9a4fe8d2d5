"""Reports on saved runs: one self-contained HTML page (figures inline as SVG), or Markdown,
LaTeX, CSV or JSON tables.

- :mod:`.model`: the runs and every number a report shows (:func:`build_report`);
- :mod:`.stats`: confidence intervals, p-values and the pairwise comparison, through the
  significance API where this kgeval has it;
- :mod:`.figures`: the matplotlib figures (seed 004's Figure 1 and three per-run views);
- :mod:`.html` and :mod:`.text`: the writers.
"""

from __future__ import annotations

from .model import FORMATS, Report, build_report
from .write import write_report

__all__ = ["FORMATS", "Report", "build_report", "write_report"]
