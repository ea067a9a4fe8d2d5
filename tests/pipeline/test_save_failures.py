"""Saving a run on a full disk or under SIGTERM (issue 31, class 3): no work lost, nothing half-written left.

The full-disk tests mount a small tmpfs (root only; skipped where mounting is not permitted), sized from
the bytes of a run saved first on the ordinary disk, so they do not depend on the model's file size.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from patience import scaled
from click.testing import CliRunner

import kgeval
from kgeval.workflow.runs import load_run, verify_manifest

FAST = ["--model", "distmult", "--epochs", "2", "--dim", "8"]
PAGE = 4096  # tmpfs charges whole pages per file


@pytest.fixture(scope="module")
def run_bytes(tmp_path_factory) -> int:
    """What one saved Nations run occupies on a tmpfs (its files rounded up to whole pages)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = kgeval.pipeline(dataset="nations", model="distmult", model_kwargs={"dim": 8}, epochs=2,
                                 progress=False)
    out = result.save(tmp_path_factory.mktemp("measure") / "run")
    return sum(-(-p.stat().st_size // PAGE) * PAGE for p in out.iterdir())


@pytest.fixture
def small_disk(tmp_path):
    """``mount(size)``: a tmpfs of ``size`` bytes under tmp_path, unmounted afterwards."""
    mounted = []

    def mount(size: int) -> Path:
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        point = tmp_path / f"disk{len(mounted)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], check=False)


@pytest.fixture
def fallback_dir(tmp_path_factory, monkeypatch) -> Path:
    """Where the CLI saves a run it could not save to its output (the temporary directory), instead of /tmp."""
    path = tmp_path_factory.mktemp("fallback")
    monkeypatch.setattr("tempfile.tempdir", str(path))
    return path


def hidden(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.name.startswith(".")]


def test_full_disk_prints_the_metrics_and_names_the_file(small_disk, run_bytes, fallback_dir):
    """Before: no metrics, exit 1 and torch's ``RuntimeError: [enforce fail at inline_container.cc:672]
    unexpected pos ...``, never saying that the disk was full."""
    disk = small_disk(run_bytes // 2)
    res = run("pipeline", "-d", "nations", *FAST, "-o", disk / "run")
    assert res.exit_code == 2, res.output
    assert re.search(r"^MRR \(inverse_harmonic_mean_rank\)\s+0\.\d+", res.output, re.M), res.output  # printed
    lines = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    m = re.fullmatch(r"error: cannot save the run: writing (\S+) failed: No space left on device; "
                     r"the run was saved to (\S+) instead", lines[0])
    assert m, lines[0]
    assert Path(m.group(1)).parent == disk / "run" and Path(m.group(1)).name in os.listdir(Path(m.group(2)))
    assert verify_manifest(m.group(2)) and Path(m.group(2)).parent == fallback_dir
    assert list(disk.iterdir()) == []  # neither a half-written run nor a hidden temporary directory


def test_full_disk_keeps_every_replicate_that_fit(small_disk, run_bytes, fallback_dir):
    """Before: the K runs were written together at the end, so a disk filling at the last lost all K."""
    disk = small_disk(2 * run_bytes + run_bytes // 2)
    res = run("pipeline", "-d", "nations", *FAST, "--replicates", "4", "-o", disk / "set")
    assert res.exit_code == 2, res.output
    assert re.findall(r"^seed (\d+): MRR 0\.\d{4}", res.output, re.M) == ["42", "43", "44"], res.output
    for seed in (42, 43):  # saved as each finished, loadable and intact
        run_dir = disk / "set" / f"seed{seed}"
        assert verify_manifest(run_dir) and load_run(run_dir).config.seed == seed
    assert sorted(p.name for p in (disk / "set").iterdir()) == ["seed42", "seed43"] and not hidden(disk)
    line = res.output.strip().splitlines()[-1]
    m = re.fullmatch(r"error: cannot save the run: writing \S+/seed44/\S+ failed: No space left on device; "
                     r"seeds 42, 43 are saved in \S+; seed 45 was not run; seed 44 was saved to (\S+) instead", line)
    assert m, line
    assert load_run(m.group(1)).config.seed == 44
    assert "3 replicates (seeds 42..44)" in res.output  # the summary of the runs trained


SIGTERM_SCRIPT = textwrap.dedent("""
    import sys, time, warnings
    import kgeval
    import kgeval.workflow.runs as runs
    warnings.simplefilter("ignore")
    kind, target = sys.argv[1], sys.argv[2]
    extra = {"num_replicates": 2} if kind == "replicates" else {}
    result = kgeval.pipeline(dataset="nations", model="distmult", model_kwargs={"dim": 8}, epochs=1,
                             progress=False, **extra)
    real = runs.write_manifest

    def slow(directory):
        real(directory)
        print("saving", flush=True)
        for _ in range(1200):  # short sleeps: a signal delivered to another thread does not cut a long one
            time.sleep(0.1)

    runs.write_manifest = slow
    result.save(target)
    print("saved", flush=True)
""")


@pytest.mark.multiprocess  # a fresh interpreter trains, saves and is signalled (~5-10 s each)
@pytest.mark.parametrize("kind", ["run", "replicates"])
def test_sigterm_during_a_save_leaves_nothing(tmp_path, kind):
    """Before: the process died at once and left ``.<name>.tmp-*`` holding a half-written run."""
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(kgeval.__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", SIGTERM_SCRIPT, kind, str(out / "run")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "saving", proc.stderr.read()
        assert hidden(out)  # the staging directory exists while the save is under way
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=scaled(60))
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM  # dies of the signal, as without kgeval's handler
    assert list(out.iterdir()) == []


def run(*args):
    """``kgeval ARGS...`` in-process (click's CliRunner)."""
    from kgeval.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def test_ctrl_c_while_torch_writes_the_model_is_not_a_failed_save(tmp_path, monkeypatch):
    """torch.save turns any exception of the file's write, even KeyboardInterrupt, into a RuntimeError:
    Ctrl-C while model.pt was written was reported as a failed save and the command carried on."""
    import torch

    import kgeval._json as kj

    class Interrupting:
        def __init__(self, fh):
            self.fh, self.calls = fh, 0

        def write(self, data):
            self.calls += 1
            if self.calls == 3:
                raise KeyboardInterrupt
            return self.fh.write(data)

        def flush(self):
            self.fh.flush()

    real_init = kj._RecordingWriter.__init__
    monkeypatch.setattr(kj._RecordingWriter, "__init__", lambda self, fh: real_init(self, Interrupting(fh)))
    with pytest.raises(KeyboardInterrupt):
        kj.torch_save({"weights": torch.zeros(1000)}, tmp_path / "m.pt")


def test_full_disk_with_json_output_still_prints_the_document(small_disk, run_bytes, fallback_dir):
    import json

    disk = small_disk(run_bytes // 2)
    res = run("pipeline", "-d", "nations", *FAST, "-o", disk / "run", "--format", "json")
    assert res.exit_code == 2, res.output
    text, _, error = res.output.partition("\nerror: ")
    doc = json.loads(text)
    assert doc["metrics"] and Path(doc["output"]).parent == fallback_dir and verify_manifest(doc["output"])
    assert "No space left on device" in error and f"saved to {doc['output']} instead" in error
