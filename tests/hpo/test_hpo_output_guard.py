"""The output-directory guard of hpo_pipeline / HPOResult.save / kgeval hpo -o DIR: one directory holds one
study's best_pipeline_config.json and trials.json, and another study's are never replaced without --overwrite."""

from __future__ import annotations

import json

import pytest

from kgeval.workflow.hpo import check_output_study, hpo_pipeline
from kgeval.workflow.runs import OutputDirectoryError

FILES = ("best_pipeline_config.json", "trials.json")
FAST = {"dataset": "nations", "model": "distmult", "epochs": 1, "pruner": "none"}


def _files(out):
    return {name: (out / name).read_bytes() for name in FILES}


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_in_memory_storage_runs_without_heartbeat_errors():
    """With an in-memory storage each trial's heartbeat thread opened its own, empty in-memory database and died
    with 'no such table: trial_heartbeats' (a StorageInternalError traceback per trial on stderr)."""
    res = hpo_pipeline(**FAST, n_trials=2, storage="sqlite://")
    assert [t.state.name for t in res.study.trials] == ["COMPLETE", "COMPLETE"]
