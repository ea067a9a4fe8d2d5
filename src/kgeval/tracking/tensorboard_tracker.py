"""The TensorBoard tracker, through :class:`torch.utils.tensorboard.SummaryWriter`.

A run ``NAME`` writes event files into ``<directory>/<NAME>/`` (default directory ``runs``, TensorBoard's
own). Per-epoch values are scalars at step = epoch; the final values are scalars at the last step
logged (the last epoch); the configuration and the tags are text summaries (``configuration``,
``tags``, as JSON). TensorBoard has no artifacts: files are copied into ``<run>/artifacts/`` and a
directory (the run directory) is recorded by its path in the text summary ``artifacts/<name>``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import TrackerError, missing

DEFAULT_DIRECTORY = "runs"


class TensorBoardTracker:
    """Write TensorBoard event files under ``directory`` (default :data:`DEFAULT_DIRECTORY`)."""

    name = "tensorboard"

    def __init__(self, directory: str | os.PathLike | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise missing("tensorboard", "tensorboard", exc) from None
        self._writer_class = SummaryWriter
        self.root = Path(directory if directory is not None else DEFAULT_DIRECTORY).expanduser()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TrackerError(f"the tensorboard tracker cannot create {self.root}: {exc.strerror or exc}") from None
        #: the log directory of the current (or last) run
        self.run_dir: Path | None = None
        self.writer = None
        self._step = 0

    def start(self, run_name: str, params: Mapping[str, Any], *, group: str | None = None) -> None:
        base = self.root / (group or "") / run_name
        self.run_dir, n = base, 1
        while self.run_dir.exists():  # two runs in one log directory would merge their curves
            n += 1
            self.run_dir = base.with_name(f"{base.name}-{n}")
        self.writer = self._writer_class(log_dir=str(self.run_dir))
        self._step = 0
        self.writer.add_text("configuration", json.dumps(dict(params), indent=2, sort_keys=True, default=str))

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.writer.add_text("tags", json.dumps(dict(tags), indent=2, sort_keys=True))

    def log_metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        if step is not None:
            self._step = max(self._step, int(step))
        at = self._step if step is None else int(step)
        for key, value in values.items():
            self.writer.add_scalar(key, float(value), global_step=at)
        self.writer.flush()

    def log_artifact(self, path: str | os.PathLike, name: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            self.writer.add_text(f"artifacts/{name or path.name}", str(path.resolve()))
            return
        target = self.run_dir / "artifacts" / (name or path.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)

    def finish(self, status: str = "FINISHED") -> None:
        if self.writer is not None:
            self.writer.add_text("status", status)
            self.writer.close()
            self.writer = None
