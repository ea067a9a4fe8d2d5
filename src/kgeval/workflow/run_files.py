"""Reading a run directory's files without trusting them: the manifest, each file, and their agreement.

A run's ``manifest.json`` names files *inside* the run directory: a name with a separator, ``..`` or
an absolute path is refused, as is a listed file that is not a regular file inside the directory
(a symlink leaving it, a FIFO, a device, a procfs file) or is longer than the manifest says. The
manifest must list every file of :data:`RUN_FILES` the directory holds: a manifest listing nothing
verified nothing.

The numbers of a run come from one source of truth: its rank table. :func:`load_run_results`
recomputes every value, null moment and p-value saved in ``results.json`` from ``rank_table.npz`` and
refuses the run (:class:`CorruptRunError`, naming the file and the first value that differs) where
they disagree, so ``kgeval report``, ``compare`` and ``evaluate`` show the same numbers or none.

:func:`check_not_run_file` refuses an output path that is a file a run relies on (``-o RUN/results.json``
replaced the run's results and left it corrupt for every later command).
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from pathlib import Path
from typing import Any

from .._json import read_json
from ..errors import InvalidInputError


class OutputDirectoryError(InvalidInputError):
    """The output directory cannot be written (exists and is not empty, is a file, not writable).

    ``saved_to``: where the run was saved instead, if it was.
    """

    saved_to: Path | None = None

MANIFEST = "manifest.json"
RUN_FILES = ("config.json", "results.json", "rank_table.npz", "model.pt", "losses.json")
#: The largest manifest, configuration and results files read (kgeval writes kilobytes).
MAX_RUN_JSON_BYTES = 16 << 20
#: A value of results.json agrees with its recomputation from the rank table within this relative
#: tolerance: other numpy builds sum in other orders (1e-15 apart); a changed digit is far beyond it.
REL_TOL = 1e-7


class CorruptRunError(InvalidInputError):
    """A run directory's files do not match its manifest (changed, truncated or missing), or disagree."""


def plain_name(name) -> bool:
    """Is ``name`` one file name (no directory part, not ``.`` or ``..``)?"""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name
            and os.sep not in name and (os.altsep is None or os.altsep not in name))


def run_file(directory: str | os.PathLike, name: str) -> Path:
    """The path of the run file ``name``, refused unless it is a regular file inside ``directory``.

    Raises :class:`CorruptRunError` naming the file: a name that is not a plain file name, a symlink
    resolving outside the directory, anything but a regular file (a FIFO would block the reader, a
    link to /dev/zero fill the memory). A missing file raises :class:`FileNotFoundError`.
    """
    directory = Path(directory)
    if not plain_name(name):
        raise CorruptRunError(f"run directory {directory}: {name!r} is not a file name inside the directory")
    path = directory / name
    real, base = Path(os.path.realpath(path)), Path(os.path.realpath(directory))
    if real.parent != base and base not in real.parents:
        raise CorruptRunError(f"{path} is a link leaving the run directory (to {real})")
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing") from None
    except OSError as exc:  # a symlink loop, a permission
        raise CorruptRunError(f"{path} cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise CorruptRunError(f"{path} is not a regular file")
    return path


def read_run_json(directory: str | os.PathLike, name: str, what: str, *, allow_nan: bool = True):
    """The JSON document of the run file ``name`` (:func:`run_file`, then the bounded, depth-checked
    :func:`kgeval._json.read_json`); every failure an :class:`InvalidInputError` naming the file."""
    return read_json(run_file(directory, name), what, max_bytes=MAX_RUN_JSON_BYTES, root=directory,
                     allow_nan=allow_nan)


def _sha256(path: Path, limit: int) -> str | None:
    """The sha256 of ``path``'s first ``limit + 1`` bytes' worth: None if it holds more than ``limit``
    (a procfs file reports size 0 and never ends)."""
    digest, seen = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(min(1 << 20, limit + 1 - seen) or 1), b""):
            seen += len(block)
            if seen > limit:
                return None
            digest.update(block)
    return digest.hexdigest()


def manifest_entries(directory: Path) -> dict[str, dict[str, Any]]:
    """``{name: {"sha256", "bytes"}}`` of the run's manifest, every entry checked for shape."""
    path = directory / MANIFEST
    try:
        data = read_run_json(directory, MANIFEST, "a kgeval run manifest", allow_nan=False)
    except InvalidInputError as exc:
        raise CorruptRunError(f"{path}: unreadable manifest ({exc})") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        raise CorruptRunError(f"{path}: unreadable manifest (no 'files' mapping)")
    for name, entry in files.items():
        if not plain_name(name) or name == MANIFEST:
            raise CorruptRunError(f"{path} lists {name!r}, which is not a file name inside the run directory")
        size, digest = (entry.get("bytes"), entry.get("sha256")) if isinstance(entry, dict) else (None, None)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0 or not isinstance(digest, str):
            raise CorruptRunError(f"{path}: the entry of {name!r} is not {{'sha256': text, 'bytes': size}}")
    return files


def verify_files(directory: Path, names=None) -> None:
    """Check the run's files against its manifest (all listed, or only ``names``); see the module docstring."""
    files = manifest_entries(directory)
    wanted = RUN_FILES if names is None else [n for n in RUN_FILES if n in names]
    unlisted = [n for n in wanted if n not in files and os.path.lexists(directory / n)]
    if unlisted:
        raise CorruptRunError(f"run directory {directory} is corrupt: {MANIFEST} does not list "
                              f"{', '.join(unlisted)}, so its content cannot be verified")
    bad = []
    for name, entry in files.items():
        if names is not None and name not in names:
            continue
        try:
            file = run_file(directory, name)
        except FileNotFoundError:
            bad.append(f"{name} is missing")
            continue
        except CorruptRunError as exc:
            bad.append(str(exc))
            continue
        if file.stat().st_size != entry["bytes"] or _sha256(file, entry["bytes"]) != entry["sha256"]:
            bad.append(f"{name} has changed since it was saved (sha256 mismatch)")
    if bad:
        raise CorruptRunError(f"run directory {directory} is corrupt: {'; '.join(bad)}")


# ---------------------------------------------------------------------------- one source of truth
def run_results(run):
    """The :class:`~kgeval.results.Results` of a loaded :class:`~kgeval.workflow.runs.Run`, computed
    from its rank table and checked against its ``results.json`` (see :func:`load_run_results`)."""
    from ..ranks import RankTable
    from ..results import Results

    paths = {}
    for name in ("results.json", "rank_table.npz"):
        try:
            paths[name] = run_file(run.directory, name)
        except FileNotFoundError:
            raise InvalidInputError(f"{run.directory} is not a complete kgeval run directory (no {name})") from None
    table = RankTable.load(paths["rank_table.npz"])
    data = read_run_json(run.directory, "results.json", "a kgeval results file", allow_nan=False)
    saved = Results.from_json(data, table, source=str(paths["results.json"]))
    # saved p-values (kept apart from the values since they are computed on request) are checked too
    saved_p = dict(saved._saved_p) | {k: v for k, v in saved.extra.items()
                                      if k.split(".")[-1].startswith(("p_", "log10_p_"))}
    fresh = Results(table, protocol=saved.protocol, extra={k: v for k, v in saved.extra.items() if k not in saved_p})
    _check_agreement(paths["results.json"], saved, fresh, saved_p, len(table))
    return fresh


def _close(a, b) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))


def _check_agreement(path: Path, saved, fresh, saved_p: dict, num_tasks: int) -> None:
    """Refuse ``saved`` (results.json) where it differs from ``fresh`` (its rank table's numbers)."""
    from ..errors import KGEvalError
    from ..keys import flat_key

    def refuse(what: str, value, truth):
        raise CorruptRunError(f"{path} disagrees with rank_table.npz beside it: {what} is {value!r} in "
                              f"results.json but {truth!r} from the rank table; the run's files do not belong "
                              "together (edited, or copied from another run)")

    tasks = saved.protocol.get("num_tasks")
    if tasks is not None and tasks != num_tasks:
        refuse("num_tasks", tasks, num_tasks)
    for (side, rank_type, key), value in list(saved._values.items()):
        fk = flat_key(side, rank_type, key)
        try:
            truth = fresh.get_metric(fk)
        except KGEvalError:
            refuse(fk, value, "not defined")
        if not _close(value, truth):
            refuse(fk, value, truth)
    for side, per in saved.null_moments.items():
        for key, moments in per.items():
            truth = fresh.null_moments.get(side, {}).get(key)
            for part in ("mean", "variance"):
                value, right = getattr(moments, part), None if truth is None else getattr(truth, part)
                if value is not None and (right is None or not _close(value, right)):
                    refuse(f"the null {part} of {side} {key}", value, right)
    if not saved_p:
        return
    flat = fresh.to_flat_dict(p_values=True)
    for key in sorted(saved_p):
        value = saved_p[key]
        if key not in flat or not _close(float(value), float(flat[key])):
            refuse(key, value, flat.get(key))


# ---------------------------------------------------------------------------- outputs
def check_not_run_file(path: str | os.PathLike, inputs=()) -> None:
    """Refuse to write ``path`` where it is a file a run relies on.

    Protected: in the directory ``path`` resolves into, when it holds a ``manifest.json``, and in
    every run directory of ``inputs``, the manifest itself, every file it lists and every name of
    :data:`RUN_FILES`, compared by resolved path (symlinks followed) and, for an existing ``path``,
    by inode (a hard link). Raises :class:`~kgeval.workflow.runs.OutputDirectoryError` naming the file.
    """
    target = Path(os.path.realpath(path))
    protected: list[Path] = []
    for directory in {target.parent, *(Path(os.path.realpath(d)) for d in inputs)}:
        if not os.path.lexists(directory / MANIFEST):
            continue
        names = {MANIFEST, *RUN_FILES}
        try:
            names.update(manifest_entries(directory))
        except CorruptRunError:
            pass  # its fixed names are still protected
        protected += [directory / n for n in sorted(names)]
    for file in protected:
        same = Path(os.path.realpath(file)) == target
        if not same and os.path.exists(target) and os.path.exists(file):
            same = os.path.samefile(target, file)  # a hard link of a run file
        if same:
            raise OutputDirectoryError(f"refusing to write {path}: it is {file.name} of the run {file.parent} "
                                       f"(listed in its {MANIFEST}); writing it would destroy the run's own file. "
                                       "Write the output elsewhere")
