"""The identity of a search's study, guarded where it is saved and where it is resumed.

Two guards keep one search's results from being mixed with another's:

- :func:`check_output_study`: an output directory holds one study's ``best_pipeline_config.json`` and
  ``trials.json``; another study's files there (another name or storage, an in-memory study of another run, a
  study of the same name made anew) are refused, never replaced. The random :data:`STUDY_ID_ATTR` tells apart
  studies of one name and storage URL.
- :func:`check_resumed_study`: trials of one study are compared with each other, so a resumed study must be run
  with the metric, base configuration and dataset it was made with (:func:`study_identity`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError, KGEvalError
from .config import PipelineConfig

#: what :meth:`HPOResult.save` writes: the best trial (its study named inside) and every trial
OUTPUT_FILES = ("best_pipeline_config.json", "trials.json")


#: the study's user attribute holding a random id (32 hex digits) drawn when kgeval first opens the study; saved
#: as ``study_id`` in ``best_pipeline_config.json``, it tells apart studies of one name and storage URL
STUDY_ID_ATTR = "kgeval_study_id"


def ensure_study_id(study) -> str:
    """The study's :data:`STUDY_ID_ATTR`, drawn (OS randomness, never the search's seed) if it has none yet."""
    import uuid

    value = study.user_attrs.get(STUDY_ID_ATTR)
    if not isinstance(value, str):
        value = uuid.uuid4().hex
        study.set_user_attr(STUDY_ID_ATTR, value)
    return value


def check_output_study(directory: str | os.PathLike, study_name: str, shown_storage: str, *, study=None,
                       new_study: bool = False, overwrite: bool = False) -> None:
    """Refuse an output directory that holds the files of another search (``overwrite=True``: replace them).

    ``best_pipeline_config.json`` names its study, storage and study id; a directory whose file names another
    study (or the same name in another storage) was overwritten without a word by the next search
    given that directory (``-o DIR --study-name other``, or another ``--model`` with the default study
    name): that study's best configuration was lost. The same study (resumed, or another worker of it)
    writes its files again. A ``trials.json`` without ``best_pipeline_config.json``, or one that cannot be
    read, belongs to no known study and is refused too.

    One name and storage URL can also name different studies: an in-memory storage is a new database on every
    run (files of an in-memory study are refused before ``study`` is known, and then unless they carry its
    id), and a study made anew in a deleted or replaced database has another id (checked once ``study``, the
    opened study, is given). A file of an older kgeval, without a study id, must name a trial of ``study`` as
    its best (with its value). A relative SQLite URL in such a file is read against the current working
    directory: the directory of the search that wrote it was not recorded.

    ``new_study=True``: the storage holds no study of that name, and this search is about to create one. It
    would get a new id and hold no trial, so files naming this study and storage are refused now, before the
    study is made (refused after, they left an empty study in the storage).
    """
    from .._json import read_json
    from .runs import OutputDirectoryError
    from .study import display_url, in_memory_sqlite

    if overwrite:
        return
    directory = Path(directory)
    best, trials = (directory / name for name in OUTPUT_FILES)
    remedy = (f"give this search another output directory, move {best.name} and {trials.name} out of "
              f"{directory} first, or pass --overwrite (overwrite=True) to replace them")
    if not best.exists():
        if trials.exists():
            raise OutputDirectoryError(f"output directory {directory} holds a {trials.name} without "
                                       f"{best.name}, of an unknown search; it would be replaced: {remedy}")
        return
    try:
        saved = read_json(best, "a kgeval search's best configuration")
    except InvalidInputError as exc:
        raise OutputDirectoryError(f"output directory {directory}: {exc}; it would be replaced: {remedy}") from None
    if not isinstance(saved, dict):
        saved = {}
    name, storage = saved.get("study_name"), saved.get("storage")
    storage = display_url(storage)  # a file of an older kgeval may hold a ?password= it did not mask
    held = _describe_saved(name, storage)
    this = f"this search (study {study_name!r} in {shown_storage})"
    if name != study_name or not _same_storage(storage, shown_storage):
        raise OutputDirectoryError(f"output directory {directory} holds the results of {held}, not of {this}; "
                                   f"they would be replaced: {remedy}")
    saved_id = saved.get("study_id")
    current = None if study is None else study.user_attrs.get(STUDY_ID_ATTR)
    if in_memory_sqlite(shown_storage):
        if current is None or saved_id != current:
            raise OutputDirectoryError(
                f"output directory {directory} holds the results of {held}, an in-memory database: that study "
                f"ended with the search that wrote them, and {this} is a new one in a new in-memory database; they "
                f"would be replaced: {remedy}")
        return
    if new_study:
        raise OutputDirectoryError(
            f"output directory {directory} holds the results of another study of the same name: {held}"
            + (f" with study id {saved_id}" if isinstance(saved_id, str) else "")
            + f", but {shown_storage} holds no study of that name now (its database deleted or replaced, or the "
            f"study deleted), so this search would make a new one; it does not hold its best trial "
            f"{saved.get('best_trial')!r}, and the results would be replaced: {remedy}")
    if study is None:
        return
    if isinstance(saved_id, str) and isinstance(current, str):
        if saved_id != current:
            raise OutputDirectoryError(
                f"output directory {directory} holds the results of another study of the same name: {held} with "
                f"study id {saved_id}, while the study there now has id {current} (made anew since: its database "
                f"deleted or replaced); they would be replaced: {remedy}")
        return
    if not isinstance(saved_id, str) and not _holds_saved_best(study, saved):
        raise OutputDirectoryError(
            f"output directory {directory} holds the results of {held}, but the study of that name in "
            f"{shown_storage} does not hold its best trial {saved.get('best_trial')!r} (value "
            f"{saved.get('best_value')!r}): another study of the same name; they would be replaced: {remedy}")


def _describe_saved(name, storage) -> str:
    """How a message names the study of a saved ``best_pipeline_config.json`` (fields possibly missing)."""
    from .study import absolute_sqlite_url

    if not isinstance(name, str) and not isinstance(storage, str):
        return "an unknown search"
    if not isinstance(storage, str):
        return f"study {name!r} (its storage not recorded)"
    where = storage
    if absolute_sqlite_url(storage) != storage:
        where = (f"{storage} (a relative SQLite URL saved by an older kgeval: its file depends on the working "
                 f"directory of that search, which was not recorded; read against the current working directory: "
                 f"{absolute_sqlite_url(storage)})")
    return f"a study of unrecorded name in {where}" if not isinstance(name, str) else f"study {name!r} in {where}"


def _holds_saved_best(study, saved: dict) -> bool:
    """Whether ``study`` holds the saved best trial: a complete trial of that number and value."""
    number, value = saved.get("best_trial"), saved.get("best_value")
    if not isinstance(number, int) or isinstance(number, bool) or not isinstance(value, (int, float)):
        return False
    return any(t.number == number and t.state.name == "COMPLETE" and t.value == value
               for t in study.get_trials(deepcopy=False))


def _same_storage(saved, current: str) -> bool:
    """Whether two storage URLs name one database: equal, or SQLite URLs of one file (a relative
    ``sqlite:///h/kgeval-hpo.db`` and the absolute URL kgeval saves for it)."""
    if not isinstance(saved, str):
        return False
    if saved == current:
        return True
    prefix = "sqlite:///"
    if saved.startswith(prefix) and current.startswith(prefix):
        a, b = (Path(url[len(prefix):].split("?", 1)[0]) for url in (saved, current))
        return a.resolve() == b.resolve()
    return False


#: the study's user attribute holding :func:`study_identity`
IDENTITY_ATTR = "kgeval_identity"
#: settings a resumed study may change: how fast a trial runs, and the seed (trials under other
#: seeds measure the same configuration, with other training noise; the seed also seeds the sampler)
_SPEED_ONLY = ("threads", "device", "seed")
_SPEED_ONLY_EVALUATION = ("device", "memory_budget", "batch_size", "entity_chunk_size", "distributed")


def _canonical_metric(metric: str) -> str:
    """``side.rank_type.key`` with the metric's canonical key (``mrr`` -> ``both.realistic.inverse_harmonic_mean_rank``)."""
    from .. import metrics
    from ..keys import parse_key

    try:
        key = parse_key(metric)
        return f"{key.side}.{key.rank_type}.{metrics.get(key.metric).key}"
    except KGEvalError:
        return str(metric)


def study_identity(metric: str, base: PipelineConfig, ds) -> dict[str, Any]:
    """What every trial of one study must share for their values to be comparable: the metric, the
    base configuration (less the settings of :data:`_SPEED_ONLY`) and the dataset's split hashes."""
    import json

    config = base.to_dict()
    for key in _SPEED_ONLY:
        config.pop(key, None)
    options = config["evaluation"]["options"]
    for key in _SPEED_ONLY_EVALUATION:
        options.pop(key, None)
    # through JSON: what the storage keeps (tuples as lists), so a resumed study compares like with like
    return json.loads(json.dumps({"metric": _canonical_metric(metric), "configuration": config,
                                  "dataset": ds.hashes()}, default=str))


def _differences(saved, current, path: str = "") -> list[str]:
    if isinstance(saved, dict) and isinstance(current, dict):
        out = []
        for key in sorted(set(saved) | set(current), key=str):
            out += _differences(saved.get(key), current.get(key), f"{path}.{key}" if path else str(key))
        return out
    return [] if saved == current else [f"{path}: {saved!r} -> {current!r}"]


#: seconds a worker waits for the settings of a new, empty study that another worker has just made
IDENTITY_WAIT = 10.0


def _wait_for_identity(study):
    """The study's recorded settings once they appear, or ``None`` after :data:`IDENTITY_WAIT` seconds (a study
    made by Optuna directly, or by a worker that died before recording them) or once a trial starts."""
    import time

    deadline = time.monotonic() + IDENTITY_WAIT
    while time.monotonic() < deadline:
        time.sleep(0.05)
        saved = study.user_attrs.get(IDENTITY_ATTR)
        if saved is not None or study.get_trials(deepcopy=False):
            return saved
    return None


def check_resumed_study(study, identity: dict[str, Any], shown_storage: str) -> None:
    """Record ``identity`` in a new study; refuse to resume one recorded with another identity.

    Trial values are only comparable under one metric, base configuration and dataset: resuming
    a study of validation MRR with ``metric="hits@10"`` (or with other epochs) would rank the
    new trials' hits@10 against the old trials' MRR and report the larger number as the best.
    A study made before kgeval recorded this (or by Optuna directly) is adopted as it is.

    A study without recorded settings and without any trial may have just been made by another worker, which
    records its settings right after: it is waited for up to :data:`IDENTITY_WAIT` seconds. (Adopted at once,
    two workers started together with other metrics each recorded theirs in turn, and both ran: MRR and
    hits@10 values ranked in one study.)
    """
    saved = study.user_attrs.get(IDENTITY_ATTR)
    if saved is None and not study.get_trials(deepcopy=False):
        saved = _wait_for_identity(study)
    if saved is None:
        study.set_user_attr(IDENTITY_ATTR, identity)
        return
    differ = _differences(saved, identity)
    if differ:
        shown = "; ".join(differ[:5]) + (f"; and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise InvalidInputError(
            f"study {study.study_name!r} in {shown_storage} was run with other settings, so its trials' values "
            f"are not comparable with new ones ({shown}); resume it with the same metric, base configuration "
            "and dataset, or give the search another study name"
        )
