"""The wheel a user would install: built from the repository (``python -m build --wheel``), installed into
a fresh virtual environment, and run from outside the source tree. It must carry the built-in datasets,
the null-model tables and the example rank file, and run the README's main job.

The venv reuses the machine's packages (``--system-site-packages``: torch is large) and installs the
wheel with ``--no-deps``; the test checks that ``kgeval`` is imported from the venv, not from the clone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("build")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _run(args, cwd, env=None, timeout=900):
    res = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(map(str, args))} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    # --no-isolation: build with the setuptools already installed (no download, same result)
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp / "dist")], cwd=ROOT)
    wheels = list((tmp / "dist").glob("kgeval-*.whl"))
    assert len(wheels) == 1, wheels
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(tmp / "venv")], cwd=tmp)
    python = tmp / "venv" / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheels[0])], cwd=tmp)
    return tmp / "venv"


def _env(venv: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KGEVAL_DATA")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_wheel_installs_with_its_data(venv, tmp_path):
    code = ("import kgeval, kgeval.data as d, kgeval.significance.null_tables as n; from pathlib import Path; "
            "p = Path(kgeval.__file__).parent; print(kgeval.__file__); print(kgeval.__version__); "
            "print(len(list((p / 'data' / 'builtin').glob('*/*.txt')))); "
            "print(len(list((p / 'data' / 'null_models').glob('*.json.gz')))); "
            "print((p / 'examples' / 'nations-distmult-ranks.tsv').is_file()); "
            "print(d.get_dataset('nations').num_entities)")
    out = _run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=_env(venv)).split()
    assert out[0].startswith(str(venv)), f"kgeval was imported from {out[0]}, not from the venv"
    from kgeval import __version__

    assert out[1] == __version__
    assert int(out[2]) == 9  # nations, kinships, umls: train/valid/test each
    assert int(out[3]) >= 8  # one null-model table per registered dataset
    assert out[4] == "True" and out[5] == "14"


def test_the_installed_command_runs_the_main_job(venv, tmp_path):
    env = _env(venv)
    version = _run([str(venv / "bin" / "kgeval"), "--version"], cwd=tmp_path, env=env)
    from kgeval import __version__

    assert __version__ in version
    out = _run([str(venv / "bin" / "kgeval"), "pipeline", "--dataset", "nations", "--model", "complex", "--epochs", "1",
                "-o", str(tmp_path / "run")], cwd=tmp_path, env=env)
    assert "inverse_harmonic_mean_rank" in out
    assert (tmp_path / "run" / "results.json").is_file() or any((tmp_path / "run").rglob("results.json"))
