"""The CSV tracker: plain files, no dependency.

A run ``NAME`` writes into ``<directory>/<NAME>/``: ``params.csv`` and ``tags.csv`` (``key,value``),
``metrics.csv`` (``step,key,value``; the final values have an empty step; a value as ``repr(float)``,
so it reads back exactly), and ``artifacts/``: files are copied there, directories (the run directory)
are listed in ``artifacts.csv`` (``name,path``) rather than copied, since they hold the model weights.
Every row is flushed as it is written: a run that crashes keeps the epochs before the crash.
"""

from __future__ import annotations

import csv
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import TrackerError

#: where runs go when no directory is given (relative to the working directory)
DEFAULT_DIRECTORY = "kgeval-tracking"


class CSVTracker:
    """Log runs as CSV files under ``directory`` (default :data:`DEFAULT_DIRECTORY`)."""

    name = "csv"

    def __init__(self, directory: str | os.PathLike | None = None):
        self.root = Path(directory if directory is not None else DEFAULT_DIRECTORY).expanduser()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TrackerError(f"the csv tracker cannot create {self.root}: {exc.strerror or exc}") from None
        #: the directory of the current (or last) run
        self.run_dir: Path | None = None
        self._files: dict[str, Any] | None = None

    def start(self, run_name: str, params: Mapping[str, Any], *, group: str | None = None) -> None:
        base = self.root / (group or "") / run_name
        self.run_dir, n = base, 1
        while self.run_dir.exists():  # never mixes two runs of one name
            n += 1
            self.run_dir = base.with_name(f"{base.name}-{n}")
        try:
            self.run_dir.mkdir(parents=True)
        except OSError as exc:
            raise TrackerError(f"the csv tracker cannot create {self.run_dir}: {exc.strerror or exc}") from None
        self._files = {}
        self._rows("params.csv", ("key", "value"), sorted(params.items()))

    def _rows(self, name: str, header: tuple[str, ...], rows) -> None:
        if self._files is None:
            raise TrackerError("the csv tracker has no active run (start one first)")
        if name not in self._files:
            handle = open(self.run_dir / name, "w", newline="", encoding="utf-8")
            self._files[name] = (handle, csv.writer(handle))
            self._files[name][1].writerow(header)
        handle, writer = self._files[name]
        writer.writerows(rows)
        handle.flush()

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self._rows("tags.csv", ("key", "value"), sorted(tags.items()))

    def log_metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        self._rows("metrics.csv", ("step", "key", "value"),
                   [("" if step is None else step, k, repr(float(v))) for k, v in values.items()])

    def log_artifact(self, path: str | os.PathLike, name: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            self._rows("artifacts.csv", ("name", "path"), [(name or path.name, str(path.resolve()))])
            return
        if self._files is None:
            raise TrackerError("the csv tracker has no active run (start one first)")
        target = self.run_dir / "artifacts" / (name or path.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)

    def finish(self, status: str = "FINISHED") -> None:
        if self._files is None:
            return
        self._rows("tags.csv", ("key", "value"), [("status", status)])
        for handle, _ in self._files.values():
            handle.close()
        self._files = None
