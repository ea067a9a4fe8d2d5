"""Helpers of the tracker tests (a module with a unique name: test modules import it directly): which tracker
packages are installed. A tracker whose package is missing is skipped, unless ``KGEVAL_REQUIRE_TRACKERS`` is set
(``.ci/run`` sets it: CI cannot pass by skipping)."""

from __future__ import annotations

import importlib.util
import os

import pytest

#: tracker -> the module its adapter imports
PACKAGES = {"mlflow": "mlflow", "wandb": "wandb", "tensorboard": "tensorboard"}


def installed(name: str) -> bool:
    module = PACKAGES.get(name)
    return module is None or importlib.util.find_spec(module) is not None


def need(name: str) -> None:
    """Skip the calling test when the tracker's package is missing (fail under KGEVAL_REQUIRE_TRACKERS)."""
    if installed(name):
        return
    message = f"the {name} tracker's package is not installed (pip install -e \".[{name}]\")"
    if os.environ.get("KGEVAL_REQUIRE_TRACKERS"):
        pytest.fail(f"KGEVAL_REQUIRE_TRACKERS is set but {message}")
    pytest.skip(message)
