"""A throw-away PostgreSQL cluster for the multi-worker tests (Debian's ``postgresql`` package).

``initdb`` into a fresh directory, ``postgres`` on a free local port with trust authentication,
removed afterwards. PostgreSQL refuses to run as root, so under root (CI) the cluster runs as
the ``postgres`` system user the Debian package creates.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


def server_binaries() -> Path | None:
    """The directory holding ``initdb`` and ``postgres`` (Debian keeps them off PATH), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    return candidates[-1].parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _drop_root():
    """preexec_fn that becomes the ``postgres`` user when running as root, or None."""
    if os.geteuid() != 0:
        return None, None
    user = pwd.getpwnam("postgres")

    def become():
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    return become, user


@contextmanager
def postgres_cluster(bindir: Path):
    """Yield the URL of a fresh cluster's ``postgres`` database; stop and delete it afterwards."""
    become, user = _drop_root()
    base = Path(tempfile.mkdtemp(prefix="kgeval-pg-"))
    proc = None
    try:
        if user is not None:
            os.chown(base, user.pw_uid, user.pw_gid)
        data = base / "data"
        subprocess.run([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "kgeval", "-E", "UTF8",
                        "--no-sync"], check=True, capture_output=True, preexec_fn=become, cwd=base)
        # the free port is only free when asked: another process (another test session's cluster) may take it
        # before this server binds it, so a server that cannot bind, or a port answered by another cluster,
        # is retried on a new port
        for attempt in range(5):
            port = _free_port()
            proc = subprocess.Popen(
                [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(base),
                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=50"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=become, cwd=base)
            url = f"postgresql+psycopg://kgeval@127.0.0.1:{port}/postgres"
            if _wait_until_ready(url, proc, data):
                break
            _stop(proc)
            proc = None
            if attempt == 4:
                raise RuntimeError("postgres found no free port in 5 attempts")
        yield url
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(base, ignore_errors=True)


def _stop(proc) -> None:
    proc.send_signal(signal.SIGINT)  # "fast" shutdown: SIGTERM would wait for pooled clients
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_until_ready(url: str, proc, data: Path) -> bool:
    """Poll until this cluster (its data directory, not whichever server answers the port) accepts a
    connection: True; False when the port was taken; an error when the server fails otherwise."""
    import psycopg
    from patience import scaled

    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    deadline = time.monotonic() + scaled(120)
    while True:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")
            if "could not bind" in err or "Address already in use" in err:
                return False
            raise RuntimeError(f"postgres exited: {err[-2000:]}")
        try:
            with psycopg.connect(dsn, connect_timeout=2) as conn:
                answered = conn.execute("SHOW data_directory").fetchone()[0]
            return Path(answered).resolve() == data.resolve()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
