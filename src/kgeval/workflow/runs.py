"""Run directories: saving a pipeline run safely, and loading it back only if it is intact.

A run directory holds ``config.json`` (configuration, versions, dataset identity),
``results.json``, ``rank_table.npz``, ``model.pt``, ``losses.json`` and ``manifest.json``
(the sha256 of every other file).

Saving (:func:`save_run`) writes into a temporary directory beside the target and renames it
into place, so a crash never leaves a half-written run. It never replaces a directory it did
not create: a non-existent target is claimed with ``mkdir`` (atomic) just before the rename,
an existing target must be empty (the kernel's rename refuses a non-empty one), and a target
that appeared during the run keeps its content while the run goes to a fresh sibling.
A symlinked target is written through the link. Directories and files get the umask's mode.

Loading (:func:`load_run`) verifies the manifest (a run saved before manifests existed only
warns) and :func:`check_dataset` refuses to evaluate a model on a dataset other than the one
it was trained on (other label -> id maps or other split hashes) unless explicitly allowed.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import platform
import secrets
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._json import current_umask, os_cause, terminate_as_exception, write_json
from ..errors import InvalidInputError, KGEvalError
from .config import PipelineConfig
from .run_files import (MANIFEST, RUN_FILES, CorruptRunError, OutputDirectoryError, check_not_run_file,  # noqa: F401
                        read_run_json, run_file, run_results, verify_files)


class DatasetMismatchError(InvalidInputError):
    """A saved model is being evaluated on a dataset other than the one it was trained on."""


# ---------------------------------------------------------------------------- identity
def versions() -> dict[str, str]:
    import numpy as np
    import torch

    from .._version import __version__

    return {"kgeval": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def dataset_identity(ds) -> dict[str, Any]:
    """What ``config.json`` records about the training dataset (compared by :func:`check_dataset`)."""
    if ds is None:
        return {"name": None, "reference": None, "hashes": None, "summary": None}
    return {"name": ds.name, "reference": ds.reference or ds.name, "hashes": ds.hashes(), "summary": ds.summary()}


def check_dataset(model, dataset, metadata: dict | None = None, *, allow_mismatch: bool = False) -> None:
    """Refuse to evaluate ``model`` on ``dataset`` unless it is the dataset the model was trained on.

    Compares the label -> id maps stored in the model file (:meth:`Model.save` with labels)
    and the split hashes stored in the run's ``config.json``. Sizes must always agree; other
    differences raise :class:`DatasetMismatchError`, or only warn with ``allow_mismatch=True``.
    """
    from .evaluation import check_model_fits

    check_model_fits(model, dataset)
    problems = []
    for kind, saved, current in (("entity", getattr(model, "entity_labels", None), dataset.entity_labels),
                                 ("relation", getattr(model, "relation_labels", None), dataset.relation_labels)):
        if saved is not None and list(saved) != list(current):
            i = next(i for i, (a, b) in enumerate(zip(saved, current)) if a != b)
            problems.append(f"{kind} id {i} is {saved[i]!r} in the training data but {current[i]!r} here")
    hashes = ((metadata or {}).get("dataset") or {}).get("hashes")
    if hashes:
        current = dataset.hashes()
        differ = [s for s in ("training", "validation", "testing") if s in hashes and hashes[s] != current.get(s)]
        if differ:
            problems.append(f"the {', '.join(differ)} split(s) differ from the training dataset's (sha256)")
    if not problems:
        return
    message = (f"dataset {dataset.name!r} is not the dataset the model was trained on: " + "; ".join(problems))
    if not allow_mismatch:
        raise DatasetMismatchError(message + " (allow it explicitly with allow_dataset_mismatch / "
                                   "--allow-dataset-mismatch)")
    warnings.warn(message + "; evaluating anyway as asked", UserWarning, stacklevel=2)


# ---------------------------------------------------------------------------- manifest
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: Path) -> dict[str, Any]:
    """Record the sha256 and size of every file of ``directory`` in ``manifest.json``."""
    files = {p.name: {"sha256": _sha256(p), "bytes": p.stat().st_size}
             for p in sorted(directory.iterdir()) if p.is_file() and p.name != MANIFEST}
    manifest = {"format": "kgeval-run-manifest", "version": 1, "files": files}
    write_json(directory / MANIFEST, manifest)
    return manifest


def verify_manifest(directory: str | os.PathLike, names=None) -> bool:
    """Check files of a run against its manifest (all listed files, or only ``names``).

    Returns False (with a warning) for a run without a manifest; raises
    :class:`CorruptRunError` naming every file that is missing or changed, a manifest entry that is
    not a file inside the run directory, a listed file that is not a regular file inside it, and a
    run file (:data:`RUN_FILES`) the manifest does not list (see :mod:`.run_files`).
    """
    directory = Path(directory)
    if not os.path.lexists(directory / MANIFEST):
        warnings.warn(f"{directory} has no {MANIFEST} (saved by an older kgeval): its files cannot be verified",
                      UserWarning, stacklevel=2)
        return False
    verify_files(directory, names)
    return True


# ---------------------------------------------------------------------------- output directory
def default_run_name(dataset: str, model: str, seed: int) -> str:
    """A run name no other run picks: dataset, model, seed, time, process id and a random suffix.

    48 random bits: with 16 (the old suffix) two of 50 names made in the same second by one
    process collided ~2% of the time (the test caught it once); a clash still never overwrites a
    run (:func:`_commit` claims the directory), but it failed the second run's save.
    """
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    clean = str(dataset).lower().replace("/", "_").replace(os.sep, "_")
    return f"{clean}-{str(model).lower()}-seed{seed}-{stamp}-{os.getpid()}-{secrets.token_hex(6)}"


def resolve_output(directory: str | os.PathLike) -> Path:
    """The absolute output path, with a symlink (to a directory) followed to its target."""
    path = Path(directory).expanduser().absolute()
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def check_output(directory: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Check before any work that ``directory`` can receive a run; returns its resolved path.

    It must be absent or an empty directory (unless ``overwrite``), and its nearest
    existing ancestor must be a directory in which a directory can be created.
    """
    target = resolve_output(directory)
    if target.exists() and not target.is_dir():  # even with overwrite: a file is never replaced by a run
        raise OutputDirectoryError(f"output directory {target} exists and is a file, not a directory")
    if target.exists() and not overwrite and any(target.iterdir()):
        raise OutputDirectoryError(f"output directory {target} already exists and is not empty")
    ancestor = target.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputDirectoryError(f"cannot write to {target}: {ancestor} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".kgeval-probe-", dir=ancestor))
    except OSError as exc:
        raise OutputDirectoryError(f"cannot write to {target}: {ancestor} is not writable ({exc.strerror})") from None
    return target


def check_output_file(path: str | os.PathLike, *, inputs=()) -> Path:
    """Check before any work that a file can be written at ``path`` (its directory exists and is writable)
    and is no file of a run (:func:`.run_files.check_not_run_file`: a run beside it or one of ``inputs``)."""
    check_not_run_file(path, inputs)
    path = resolve_output(path)
    if path.is_dir():
        raise OutputDirectoryError(f"cannot write {path}: it is a directory")
    if not path.parent.is_dir():
        raise OutputDirectoryError(f"cannot write {path}: {path.parent} is not an existing directory")
    try:
        with tempfile.NamedTemporaryFile(prefix=".kgeval-probe-", dir=path.parent):
            pass
    except OSError as exc:
        raise OutputDirectoryError(f"cannot write {path}: {path.parent} is not writable ({exc.strerror})") from None
    return path


def save_run(result, directory: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``result`` (a :class:`PipelineResult`) as a run directory; see the module docstring.

    A write that fails (a full disk, a quota) raises :class:`OutputDirectoryError` naming the file and
    the system's reason ("No space left on device"); nothing of the run is left behind, SIGTERM included.
    """
    target = check_output(directory, overwrite=overwrite)
    existed = target.exists()  # an empty directory named by the caller is filled; anything else is claimed
    target.parent.mkdir(parents=True, exist_ok=True)
    with staging_directory(target) as tmp:
        _write_files(result, tmp, target)
        return _commit(tmp, target, existed=existed, overwrite=overwrite)


@contextlib.contextmanager
def staging_directory(target: Path):
    """A new hidden directory beside ``target`` to write into, removed if the block fails or the process
    receives SIGTERM (:func:`kgeval._json.terminate_as_exception`); the block renames it into place."""
    with terminate_as_exception():
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            os.chmod(tmp, 0o777 & ~current_umask())
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def save_failure(path: Path, exc: BaseException, what: str = "the run") -> OutputDirectoryError:
    """The one-line error of a failed write: the file and the system's reason, e.g.
    ``cannot save the run: writing /data/run/model.pt failed: No space left on device``."""
    return OutputDirectoryError(f"cannot save {what}: writing {path} failed: {os_cause(exc)}")


def _write_files(result, directory: Path, target: Path) -> None:
    ds = result.dataset
    labels = {} if ds is None else {"entity_labels": ds.entity_labels, "relation_labels": ds.relation_labels}
    steps = (("config.json", lambda p: write_json(p, result.metadata())),
             ("results.json", result.results.save_json),
             ("rank_table.npz", result.results.rank_table.save),
             ("model.pt", lambda p: result.model.save(p, **labels)),
             ("losses.json", lambda p: write_json(p, {"losses": result.losses, "training": result.training.to_dict()})),
             (MANIFEST, lambda p: write_manifest(p.parent)))
    for name, write in steps:
        try:
            write(directory / name)
        except (OSError, RuntimeError, KGEvalError) as exc:  # named by its final path: the staging one is gone
            raise save_failure(target / name, exc) from exc


def _commit(tmp: Path, target: Path, *, existed: bool, overwrite: bool) -> Path:
    """Move the finished ``tmp`` into place without ever replacing someone else's files."""
    if existed and target.is_dir() and not any(target.iterdir()):
        os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.rename(tmp, target)  # the kernel refuses if ``target`` stopped being empty
        return target
    if existed and overwrite:
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{secrets.token_hex(2)}")
        target.rename(old)
        os.rename(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
        return target
    try:
        os.mkdir(target)  # claim the name: fails if another process created it meanwhile
    except FileExistsError:
        kept = _claim_sibling(target)
        os.rename(tmp, kept)
        error = OutputDirectoryError(f"output directory {target} appeared while this run was saving; "
                                     f"the run was saved to {kept} instead")
        error.saved_to = kept
        raise error from None
    os.rename(tmp, target)  # replaces the empty directory claimed just above
    return target


def _claim_sibling(target: Path) -> Path:
    while True:
        candidate = target.with_name(f"{target.name}-{os.getpid()}{secrets.token_hex(2)}")
        try:
            os.mkdir(candidate)
            return candidate
        except FileExistsError:
            continue


# ---------------------------------------------------------------------------- loading
@dataclass
class Run:
    """A saved run: its directory, ``config.json``'s content and the :class:`PipelineConfig`."""

    directory: Path
    metadata: dict[str, Any]
    config: PipelineConfig

    def load_model(self, *, shard: tuple[int, int] | None = None):
        """The run's model (``shard=(rank, world)``: that rank's entity shard only, see :func:`kgeval.models.load_model`),
        checked to be the model its configuration describes (:func:`check_model_config`)."""
        from ..models import load_model

        try:
            path = run_file(self.directory, "model.pt")
        except FileNotFoundError:
            raise InvalidInputError(f"{self.directory} has no model.pt: the run's model was not saved") from None
        model = load_model(path, shard=shard)
        check_model_config(model, self.config, path)
        return model

    def load_dataset(self, model, dataset=None, *, data_dir=None, allow_dataset_mismatch: bool = False):
        """The run's dataset (or ``dataset``), checked to be the one ``model`` was trained on (:func:`check_dataset`)."""
        from ..data import get_dataset

        ds = get_dataset(self.config.dataset if dataset is None else dataset, data_dir=data_dir,
                         drop_unseen=self.config.drop_unseen)
        check_dataset(model, ds, self.metadata, allow_mismatch=allow_dataset_mismatch)
        return ds


def check_model_config(model, config: PipelineConfig, path) -> None:
    """Refuse a model file that is not the model of the run's ``config.json`` (another model name, dimension,
    inverse relations or model option): e.g. a ``model.pt`` copied in from another run, which a run without a
    manifest (or with a rewritten one) evaluated under this run's name and configuration."""
    spec = config.model
    if spec is None:
        return
    model = getattr(model, "local", model)  # an entity shard: the model it wraps
    found = {"name": getattr(model, "name", None), "dim": getattr(model, "dim", None),
             "inverse_relations": getattr(model, "inverse_relations", False), **dict(getattr(model, "hparams", {}))}
    wanted = {"name": spec.name, **{k: v for k, v in spec.options.items() if k != "seed" and v is not None}}
    wanted.setdefault("inverse_relations", False)
    differ = [f"{key} {wanted[key]!r} in config.json but {found[key]!r} in the model file"
              for key in wanted if key in found and found[key] != wanted[key]]
    if differ:
        raise CorruptRunError(f"{path} is not the model of its run's configuration: {'; '.join(differ)}")


def load_run(directory: str | os.PathLike) -> Run:
    """Read a run directory after verifying its manifest; raises ``InvalidInputError`` if it is not one."""
    directory = Path(directory)
    path = directory / "config.json"
    if not directory.is_dir() or not os.path.lexists(path):
        raise InvalidInputError(f"{directory} is not a kgeval run directory (no config.json)")
    verify_manifest(directory)
    meta = read_run_json(directory, "config.json", "a kgeval pipeline configuration")
    if not isinstance(meta, dict) or not isinstance(meta.get("configuration"), dict):
        raise InvalidInputError(f"{path}: not a kgeval pipeline configuration")
    dataset = meta.get("dataset")
    hashes = dataset.get("hashes") if isinstance(dataset, dict) else None
    if (dataset is not None and not isinstance(dataset, dict)) or (hashes is not None and not (
            isinstance(hashes, dict) and all(isinstance(v, str) for v in hashes.values()))):
        # check_dataset and compare read them: a list of hashes was a TypeError there
        raise InvalidInputError(f"{path}: not a kgeval pipeline configuration ('dataset' is not an object with "
                                "text split hashes)")
    try:
        config = PipelineConfig.from_dict(meta["configuration"])
    except KGEvalError as exc:
        raise InvalidInputError(f"{path}: invalid configuration: {exc}") from None
    return Run(directory, meta, config)


def load_run_results(directory: str | os.PathLike):
    """``(Run, Results)`` of a run directory, every number computed from its rank table.

    ``results.json`` supplies the protocol and the values the rank table cannot give (query-level
    extras); each of its metric values, null moments and p-values is recomputed from
    ``rank_table.npz`` and must agree (relative :data:`REL_TOL`), else :class:`CorruptRunError` names
    the file and the first value that differs.

    Parameters
    ----------
    directory : str or os.PathLike
        A run directory (``kgeval pipeline``'s output).

    Returns
    -------
    (Run, Results)
        The run (:func:`~kgeval.workflow.runs.load_run`, manifest verified) and its results, computed
        from its rank table.

    Examples
    --------
    >>> import kgeval                                                    # doctest: +SKIP
    >>> run_dir = kgeval.pipeline(dataset="nations", model="distmult", epochs=2).save("run")  # doctest: +SKIP
    >>> run, results = load_run_results(run_dir)                         # doctest: +SKIP
    >>> results["mrr"] == float(np.mean(1 / results.rank_table.ranks("realistic")))  # doctest: +SKIP
    True
    """
    run = load_run(directory)
    return run, run_results(run)
