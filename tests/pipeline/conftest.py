"""Shared by the run-file tests: one trained and saved Nations run (tests copy it before changing it);
its MRR oracle is in run_oracle.py."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import kgeval


@pytest.fixture(scope="session")
def saved(tmp_path_factory) -> Path:
    """A saved 2-epoch DistMult run on Nations; read-only: copy it before editing any of its files."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = kgeval.pipeline(dataset="nations", model="distmult", model_kwargs={"dim": 8}, epochs=2,
                                 progress=False)
    return result.save(tmp_path_factory.mktemp("run-files") / "run")
