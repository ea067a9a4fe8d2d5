"""The Weights & Biases tracker.

``mode`` is W&B's (``"online"``, ``"offline"``, ``"disabled"``; default ``WANDB_MODE``, else online).
Offline runs are written under ``directory`` (default ``WANDB_DIR``, else the working directory) and
uploaded later with ``wandb sync``. Online, the server (``WANDB_BASE_URL``, else api.wandb.ai) is asked
once, with :data:`CONNECT_TIMEOUT`, before any run.

The configuration is the run's config (nested, as kgeval writes it); per-epoch values are history rows
at step = epoch; the final values go to the run's summary; tags are the config entry ``tags``; files and the
run directory are logged as W&B artifacts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import TrackerError, missing

#: seconds to wait for the W&B server's answer (online mode)
CONNECT_TIMEOUT = 10
#: the project of runs when none is given and ``WANDB_PROJECT`` is unset
DEFAULT_PROJECT = "kgeval"
_BAD_ARTIFACT = re.compile(r"[^\w\-.]")


def _unflatten(params: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):  # a path that is also a value: keep the dotted key
                node = out
                leaf = key
                break
        node[leaf] = value
    return out


def check_server(base_url: str) -> None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(base_url, timeout=CONNECT_TIMEOUT):
            pass
    except urllib.error.HTTPError:
        return  # the server answered
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TrackerError(f"cannot reach the W&B server at {base_url}: {reason}; log offline with "
                           "WANDB_MODE=offline (upload later with wandb sync)") from None


class WandbTracker:
    """Log runs to W&B: ``project`` (default ``WANDB_PROJECT``, else ``kgeval``), ``entity``, ``mode``, ``directory``."""

    name = "wandb"

    def __init__(self, project: str | None = None, directory: str | os.PathLike | None = None,
                 mode: str | None = None, entity: str | None = None):
        try:
            import wandb
        except ImportError as exc:
            raise missing("wandb", "wandb", exc) from None
        self.wandb = wandb
        self.project = project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT
        self.mode = (mode or os.environ.get("WANDB_MODE") or "online").lower()
        if self.mode not in ("online", "offline", "disabled", "dryrun", "run"):
            raise TrackerError(f"wandb mode must be online, offline or disabled, got {self.mode!r}")
        self.entity = entity
        self.directory = Path(directory or os.environ.get("WANDB_DIR") or ".").expanduser()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TrackerError(f"the wandb tracker cannot create {self.directory}: {exc.strerror or exc}") from None
        if self.mode in ("online", "run"):
            check_server(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
        #: the current (or last) W&B run
        self.run = None

    def start(self, run_name: str, params: Mapping[str, Any], *, group: str | None = None) -> None:
        settings = self.wandb.Settings(silent=True, console="off")
        self.run = self.wandb.init(project=self.project, entity=self.entity, name=run_name, group=group,
                                   config=_unflatten(params), dir=str(self.directory), mode=self.mode,
                                   settings=settings, reinit="create_new")

    def set_tags(self, tags: Mapping[str, str]) -> None:
        # W&B tags are labels of at most 64 characters, too short for key:value pairs such as a sha256:
        # the tags go into the config under "tags", whole
        merged = {**dict(self.run.config.get("tags") or {}), **dict(tags)}
        self.run.config.update({"tags": merged}, allow_val_change=True)

    def log_metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        if step is None:
            self.run.summary.update(dict(values))
        else:
            self.run.log(dict(values), step=int(step))

    def log_artifact(self, path: str | os.PathLike, name: str | None = None) -> None:
        path = Path(path)
        label = _BAD_ARTIFACT.sub("_", f"{self.run.name or self.run.id}-{name or path.name}")
        artifact = self.wandb.Artifact(label, type="kgeval-run" if path.is_dir() else "kgeval-file")
        if path.is_dir():
            artifact.add_dir(str(path))
        else:
            artifact.add_file(str(path), name=name or path.name)
        self.run.log_artifact(artifact)

    def finish(self, status: str = "FINISHED") -> None:
        if self.run is not None:
            self.run.finish(exit_code=0 if status == "FINISHED" else 1)
