"""Optuna studies that several workers can share and resume safely.

- **Opening** (:func:`open_study`): relational storages are opened with a heartbeat and, for
  SQLite, a lock timeout; two workers creating the same new database at the same moment race
  on its tables (``table ... already exists``, ``UNIQUE constraint failed``), so opening is
  retried with a short random back-off instead of failing with a raw SQL error. A study that does not exist
  yet is made only after the caller's last check (``before_create``), so a refused search leaves none behind.
- **Killed workers** (:data:`HEARTBEAT_INTERVAL`, :data:`GRACE_PERIOD`): every running trial
  records a heartbeat; a RUNNING trial whose heartbeat is older than the grace period belongs
  to a dead worker and is marked FAILED when a worker opens or resumes the study (and before
  each new trial), so it no longer shows as running forever.
- **Sampler seeds** (:func:`trial_seed`): every worker of a study is started with the same
  ``seed``. A sampler seeded once per worker would make two workers, or a resumed study,
  draw the same configurations. Instead trial number ``n`` is sampled by a fresh sampler seeded
  with ``trial_seed(seed, n)``; trial numbers are unique within a study, so workers and
  resumptions continue the sequence rather than repeat it, and a study run sequentially with
  the same seed is still reproducible. (The grid sampler needs no such care: it assigns grid
  point ``n`` of one seeded permutation to trial ``n`` and skips points already visited.)
- **Server storages** (PostgreSQL, MySQL; :func:`check_storage`): workers on several machines
  share one study through a database server. Before anything else the server is reached once
  with a short connect timeout, so an unreachable URL or a missing driver is one named error
  instead of a retry loop and a SQLAlchemy traceback; credentials in URLs (``user:password@``, ``?password=``
  and every other form a driver reads, :func:`display_url`) are masked wherever kgeval prints or saves a
  storage URL, and in the database errors it passes on (:func:`redact`).
"""

from __future__ import annotations

import os
import random
import re
import time
import warnings
from collections.abc import Callable

import numpy as np
import optuna
from optuna.samplers import BaseSampler

from .._compat import install_hint
from ..errors import InvalidInputError, KGEvalError, unknown_name

#: seconds between heartbeats of a running trial
HEARTBEAT_INTERVAL = 30
#: a RUNNING trial without a heartbeat for this many seconds is considered dead and marked FAILED
GRACE_PERIOD = 120
#: seconds SQLite waits for another worker's lock before giving up
SQLITE_TIMEOUT = 60
#: attempts to open a storage while another worker is creating it
OPEN_ATTEMPTS = 8
#: seconds to wait for a database server to accept a connection
CONNECT_TIMEOUT = 10
#: how to install a missing database driver, by the module SQLAlchemy failed to import
#: (SQLAlchemy 2.1 reads ``postgresql://`` as psycopg 3, older versions as psycopg2)
DRIVER_HINTS = {"psycopg": install_hint("postgres", "'psycopg[binary]'"),
                "psycopg2": ("pip install psycopg2-binary, or write the URL as postgresql+psycopg:// and "
                             + install_hint("postgres")),
                "pymysql": "pip install pymysql"}

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "none")


def trial_seed(seed: int, number: int) -> int:
    """The sampler seed of trial ``number``: ``SeedSequence([seed, number])``'s first 32-bit word."""
    return int(np.random.SeedSequence([int(seed), int(number)]).generate_state(1)[0])


class TrialSeededSampler(BaseSampler):
    """Samples trial ``n`` with ``make(trial_seed(seed, n))``: a fresh, differently seeded sampler per trial.

    Optuna's samplers keep no state between trials beyond their random generator (TPE and
    grid read the finished trials from the study), so a fresh sampler per trial loses nothing.
    """

    def __init__(self, make: Callable[[int], BaseSampler], seed: int):
        self._make, self._seed = make, int(seed)
        self._current: tuple[int, BaseSampler] | None = None

    def _for(self, trial) -> BaseSampler:
        if self._current is None or self._current[0] != trial.number:
            self._current = (trial.number, self._make(trial_seed(self._seed, trial.number)))
        return self._current[1]

    def infer_relative_search_space(self, study, trial):
        return self._for(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._for(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._for(trial).sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self._for(trial).before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self._for(trial).after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:  # seeds are derived from trial numbers; nothing to reseed
        pass


def make_sampler(name: str, seed: int, grid: dict[str, list] | None = None) -> BaseSampler:
    """``"tpe"`` or ``"random"`` seeded per trial (:class:`TrialSeededSampler`), or ``"grid"`` over ``grid``."""
    if name not in SAMPLERS:
        raise unknown_name("sampler", name, SAMPLERS)
    if name == "tpe":
        return TrialSeededSampler(lambda s: optuna.samplers.TPESampler(seed=s), seed)
    if name == "random":
        return TrialSeededSampler(lambda s: optuna.samplers.RandomSampler(seed=s), seed)
    # the grid sampler already gives trial n grid point n of one seeded permutation (and skips
    # visited points), so one sampler seeded with ``seed`` never repeats across workers
    return optuna.samplers.GridSampler(grid, seed=seed)


def make_pruner(name: str):
    if name not in PRUNERS:
        raise unknown_name("pruner", name, PRUNERS)
    return optuna.pruners.MedianPruner(n_startup_trials=2) if name == "median" else optuna.pruners.NopPruner()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class StorageError(InvalidInputError):
    """The Optuna storage URL cannot be used: malformed, its driver is missing, or the server is unreachable."""


#: query parameters that carry a credential: password (libpq, psycopg, pymysql), sslpassword, passfile,
#: passwd (MySQLdb), pwd, and any name with secret/token/credential in it
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|credential", re.IGNORECASE)
#: ``name=value`` inside a keyword string (a libpq conninfo, ``options=-c ...``, a ``PGPASSWORD=...``): the value
#: of a secret name, quoted ('...' with \\' escapes, as libpq reads it) or up to the next space or separator
_SECRET_KEYWORD = re.compile(r"""((?<![\w.-])[\w.-]*(?:pass|pwd|secret|token|credential)[\w.-]*\s*=\s*)"""
                             r"""('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^\s&;,]*)""", re.IGNORECASE)
#: SQLAlchemy's reading of ``scheme://user:password@``: the user has no ``:`` or ``/``, the password no ``@``
_USERINFO = re.compile(r"([\w+]+://[^:/]*:)([^@]*)@")


def display_url(url: str) -> str:
    """``url`` with every credential replaced by ``***``: what kgeval prints, logs and saves of a storage URL.

    The forms a database driver accepts: ``user:password@`` (parsed as SQLAlchemy parses it), query
    parameters naming a secret (``?password=``, ``sslpassword``, ``passfile``, ``passwd``, ``pwd``, also
    percent-encoded), ``name=value`` secrets inside any parameter's value (libpq ``options`` or a keyword
    string) and in a text that is no URL at all (``host=db password=x``, ``PGPASSWORD=x``).

    Examples
    --------
    >>> display_url("postgresql://me:s3cret@db/hpo?sslpassword=k&application_name=a")
    'postgresql://me:***@db/hpo?sslpassword=***&application_name=a'
    >>> display_url("host=db password='a b' user=me")
    'host=db password=*** user=me'
    """
    if not isinstance(url, str):
        return url
    head, rest = "", url
    match = _USERINFO.match(url)
    if match:
        head, rest = match.group(1) + "***@", url[match.end():]
    base, sep, query = rest.partition("?")
    if not sep:
        return head + _SECRET_KEYWORD.sub(r"\1***", base)
    return head + _SECRET_KEYWORD.sub(r"\1***", base) + "?" + "&".join(_mask_parameter(p) for p in query.split("&"))


def _mask_parameter(item: str) -> str:
    from urllib.parse import quote, unquote_plus

    key, eq, value = item.partition("=")
    if not eq:
        return _SECRET_KEYWORD.sub(r"\1***", item)
    if _SECRET_NAME.search(unquote_plus(key)):
        return f"{key}=***"
    plain = unquote_plus(value)
    masked = _SECRET_KEYWORD.sub(r"\1***", plain)
    return item if masked == plain else f"{key}={quote(masked, safe='=*-')}"


def _secret_values(url: str) -> list[str]:
    """The credentials in ``url`` as they may appear in a driver's message (raw and decoded), longest first."""
    from urllib.parse import unquote, unquote_plus

    found = []
    match = _USERINFO.match(url)
    if match:
        found.append(match.group(2))
    for item in url.split("?", 1)[1].split("&") if "?" in url else []:
        key, eq, value = item.partition("=")
        if eq and _SECRET_NAME.search(unquote_plus(key)):
            found.append(value)
        found += [m.group(2).strip("'\"") for m in _SECRET_KEYWORD.finditer(unquote_plus(value))]
    found += [m.group(2).strip("'\"") for m in _SECRET_KEYWORD.finditer(url)]
    values = {v for f in found for v in (f, unquote(f), unquote_plus(f)) if len(v) >= 3}
    return sorted(values, key=len, reverse=True)


def redact(text: str, url: str) -> str:
    """``text`` (an error message) with ``url``'s credentials masked wherever they appear in it.

    A driver's message can quote a part of the URL (libpq echoes a bad ``options`` value); values
    shorter than 3 characters are left alone, replacing them would garble every message.
    """
    text = text.replace(url, display_url(url))
    for secret in _secret_values(url):
        text = text.replace(secret, "***")
    return _SECRET_KEYWORD.sub(r"\1***", text)


def absolute_sqlite_url(url: str) -> str:
    """``url`` with a relative SQLite file made absolute (against the working directory); any other URL as it is.

    ``sqlite:///h.db`` names a different database in each working directory: recorded as it was typed (in
    ``best_pipeline_config.json``, the resume hint), it could not tell the study of one directory from the
    study of another. In-memory databases (``sqlite://``, ``sqlite:///:memory:``) and ``file:`` URIs are kept.
    """
    match = re.match(r"(sqlite(?:\+\w+)?:///)([^?]*)(.*)$", url, flags=re.IGNORECASE | re.DOTALL)
    if match is None:
        return url
    prefix, path, query = match.groups()
    if not path or path == ":memory:" or path.startswith("file:") or os.path.isabs(path):
        return url
    return f"{prefix}{os.path.abspath(path)}{query}"


def in_memory_sqlite(url: str) -> bool:
    """Whether ``url`` is an in-memory SQLite database (``sqlite://``, ``sqlite:///:memory:``, a ``file:`` URI with
    ``mode=memory`` or ``:memory:``): a new, empty database every time it is opened."""
    match = re.match(r"sqlite(?:\+\w+)?://(/?)([^?]*)(\?.*)?$", url, flags=re.IGNORECASE | re.DOTALL)
    if match is None:
        return False
    path, query = match.group(2), match.group(3) or ""
    if not match.group(1) or path in ("", ":memory:"):
        return True
    return path.startswith("file:") and (path.startswith("file::memory:")
                                         or re.search(r"[?&]mode=memory(&|$)", query) is not None)


def _backend(url: str) -> str:
    return url.split(":", 1)[0].split("+", 1)[0].lower()


def _engine_kwargs(url: str) -> dict:
    backend = _backend(url)
    if backend == "sqlite":
        return {"connect_args": {"timeout": SQLITE_TIMEOUT}}
    if backend == "postgresql":
        # pool_pre_ping: a long trial outlives idle connections that the server or a firewall closed
        return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT}, "pool_pre_ping": True}
    return {"pool_pre_ping": True}


def check_storage(url: str) -> None:
    """Refuse a storage URL that cannot work, with one line naming why; connect once to a server.

    SQLite files are not checked here (a missing directory or a locked file surfaces when the study
    is opened); server URLs are: parsed, their driver imported, and one connection made.
    """
    import sqlalchemy
    import sqlalchemy.exc

    shown = display_url(url)
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except (sqlalchemy.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise StorageError(f"storage {shown!r} is not a database URL such as 'sqlite:///hpo.db' or "
                           f"'postgresql://user:password@host:5432/database'") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return
    try:
        engine = sqlalchemy.create_engine(parsed, **_engine_kwargs(url))
    except ModuleNotFoundError as exc:
        hint = DRIVER_HINTS.get(exc.name, f"install the Python module {exc.name!r}")
        raise StorageError(f"storage {shown!r} needs the {backend} driver {exc.name!r}, which is not installed: "
                           f"{hint}") from None
    except sqlalchemy.exc.NoSuchModuleError:
        raise StorageError(f"cannot open the Optuna storage {shown!r}: unknown database backend {backend!r} "
                           f"(use sqlite:///FILE or postgresql://user:password@host:port/database)") from None
    except sqlalchemy.exc.ArgumentError as exc:
        raise StorageError(f"cannot open the Optuna storage {shown!r}: {redact(_first_line(exc), url)}") from None
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.DBAPIError as exc:
        reason = redact(str(getattr(exc, "orig", exc)), url).strip().splitlines()
        raise StorageError(f"cannot reach the Optuna storage {shown}: {reason[0] if reason else type(exc).__name__} "
                           f"(is the server running and the URL right? waited up to {CONNECT_TIMEOUT} s)") from None
    finally:
        engine.dispose()


def _storage(url: str):
    kwargs = _engine_kwargs(url)
    if in_memory_sqlite(url):
        # one process, no other worker: nothing to detect; and the heartbeat thread's own connection is another
        # in-memory database ("no such table: trial_heartbeats" tracebacks from that thread on every trial)
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    with warnings.catch_warnings():  # the heartbeat is "experimental" in Optuna: not the user's concern
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_INTERVAL,
                                          grace_period=GRACE_PERIOD)


def open_study(storage: str, study_name: str, *, direction: str, sampler, pruner, load_if_exists: bool,
               before_create: Callable[[], None] | None = None, on_create: Callable[[object], None] | None = None):
    """Create or load ``study_name`` in ``storage`` (a database URL); safe when workers start together.

    ``before_create`` is called when the study does not exist yet, just before this call creates it: whatever
    it refuses leaves no study behind (an empty study left by a refused search was later adopted, or refused
    as "run with other settings" although it had no trial). A worker that loses the race to create the study
    loads the winner's. ``on_create(study)`` is called by the worker that made the study, and by no other, before
    it runs anything (it records what the other workers must agree with). Stale RUNNING trials of dead workers
    are marked FAILED (see the module docstring).
    """
    check_storage(storage)
    shown = display_url(storage)
    rdb = _retrying(lambda: _storage(storage), study_name, shown, storage)
    created = False
    if not _retrying(lambda: _study_exists(rdb, study_name), study_name, shown, storage):
        if before_create is not None:
            before_create()
        directions = [optuna.study.StudyDirection.MAXIMIZE if direction == "maximize"
                      else optuna.study.StudyDirection.MINIMIZE]
        try:
            _retrying(lambda: rdb.create_new_study(directions, study_name), study_name, shown, storage)
            created = True
        except optuna.exceptions.DuplicatedStudyError:  # another worker created it since: loaded below
            pass
    if not created and not load_if_exists:
        raise InvalidInputError(
            f"study {study_name!r} already exists in {shown}; pass load_if_exists=True to resume it "
            f"or another study_name"
        )
    study = _retrying(lambda: optuna.load_study(study_name=study_name, storage=rdb, sampler=sampler, pruner=pruner),
                      study_name, shown, storage)
    if study.direction.name.lower() != direction:
        raise InvalidInputError(
            f"study {study_name!r} in {shown} optimises in direction {study.direction.name.lower()}, "
            f"but the metric asks to {direction}"
        )
    if created and on_create is not None:
        on_create(study)
    fail_stale_trials(study)
    return study


def _study_exists(rdb, study_name: str) -> bool:
    try:
        rdb.get_study_id_from_name(study_name)
    except KeyError:
        return False
    return True


def _retrying(step: Callable, study_name: str, shown: str, url: str):
    """``step()``, retried with a short random back-off while another worker creates the same database.

    Two workers creating one new database race on its tables (SQLite: "table ... already exists" / UNIQUE
    failed; PostgreSQL: DuplicateTable "relation ... already exists", UniqueViolation on pg_type, or an
    InternalError of the transaction that lost: seen in the PostgreSQL tests under load). Unreachable servers
    and bad credentials were refused by :func:`check_storage` before.
    """
    import sqlalchemy.exc

    for attempt in range(OPEN_ATTEMPTS):
        try:
            return step()
        except (optuna.exceptions.DuplicatedStudyError, KeyError, KGEvalError):
            raise
        except sqlalchemy.exc.DBAPIError as exc:
            if attempt == OPEN_ATTEMPTS - 1:
                raise KGEvalError(f"cannot open the Optuna study {study_name!r} in {shown}: "
                                  f"{redact(_first_line(exc), url)}") from None
            time.sleep(random.uniform(0.05, 0.2) * 2**attempt)  # OS-seeded: never the search's seed
        except Exception as exc:  # bad storage URL, missing database driver, unreadable file, ...
            raise InvalidInputError(f"cannot open the Optuna study {study_name!r} in {shown!r}: "
                                    f"{redact(_first_line(exc), url)}") from None


def fail_stale_trials(study) -> list[int]:
    """Mark RUNNING trials whose heartbeat is older than the grace period FAILED; their numbers."""
    running = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
    if not running:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    still = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
    return sorted(running - still)


def silent_trials_note(study) -> str | None:
    """What to say about RUNNING trials whose worker has stopped sending heartbeats, or ``None``.

    :func:`fail_stale_trials` marks them failed only after :data:`GRACE_PERIOD`; until then a resume listed
    a trial of a killed worker as running without comment. A heartbeat older than :data:`HEARTBEAT_INTERVAL`
    means a missed beat; a trial with no heartbeat at all (its worker died before the first) is never failed
    by Optuna, and is named as such.
    """
    rdb = getattr(getattr(study, "_storage", None), "_backend", getattr(study, "_storage", None))
    if not isinstance(rdb, optuna.storages.RDBStorage) or not rdb.heartbeat_interval:
        return None
    interval, grace = rdb.heartbeat_interval, rdb.grace_period or 2 * rdb.heartbeat_interval
    try:
        silent, never = _silent_trials(study, rdb, interval)
    except Exception:  # noqa: BLE001 -- Optuna's tables are not a public interface: no note rather than a crash
        return None
    notes = []
    if silent:
        ages = sorted(silent.values())
        ago = f"{ages[0]:.0f} s" if len(ages) == 1 else f"{ages[0]:.0f}-{ages[-1]:.0f} s"
        notes.append(f"{_trials(silent)} whose worker{'s' if len(silent) > 1 else ''} stopped sending heartbeats "
                     f"{ago} ago; {'it is' if len(silent) == 1 else 'they are'} marked failed after {grace} s")
    if never:
        notes.append(f"{_trials(never)} RUNNING without any heartbeat {max(never.values()):.0f} s after "
                     f"{'its' if len(never) == 1 else 'their'} start (the worker died before its first): Optuna "
                     "never marks such a trial failed; if its worker is gone, it stays RUNNING")
    return "; ".join(notes) or None


def _trials(ages: dict[int, float]) -> str:
    numbers = ", ".join(map(str, sorted(ages)))
    return f"1 trial (trial {numbers})" if len(ages) == 1 else f"{len(ages)} trials (trials {numbers})"


def _silent_trials(study, rdb, interval: float) -> tuple[dict[int, float], dict[int, float]]:
    """``({trial number: seconds since its last heartbeat}, {trial number: seconds since its start})`` of the
    RUNNING trials with a missed heartbeat, and of those with none at all."""
    import datetime

    import sqlalchemy
    from optuna.storages._rdb import models

    running = {t._trial_id: t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
    if not running:
        return {}, {}
    with rdb.scoped_session() as session:  # the database's clock: the one the heartbeats were written with
        now = session.execute(sqlalchemy.func.now()).scalar().replace(tzinfo=None)
        beats = {row.trial_id: row.heartbeat.replace(tzinfo=None) for row in
                 session.query(models.TrialHeartbeatModel).filter(
                     models.TrialHeartbeatModel.trial_id.in_(list(running)))}
    silent = {running[i].number: (now - beat).total_seconds() for i, beat in beats.items()}
    started = {t.number: (datetime.datetime.now() - t.datetime_start).total_seconds()
               for i, t in running.items() if i not in beats and t.datetime_start is not None}
    return ({n: age for n, age in silent.items() if age > interval},
            {n: age for n, age in started.items() if age > interval})
