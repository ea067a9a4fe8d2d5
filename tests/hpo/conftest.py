"""Fixtures of the HPO tests: a throw-away PostgreSQL cluster shared by the modules that need a server."""

from __future__ import annotations

import os

import pytest

from postgres_server import postgres_cluster, server_binaries


@pytest.fixture(scope="session")
def postgres_url():
    """The URL of a fresh cluster's ``postgres`` database. Skipped when PostgreSQL's server binaries or psycopg
    are missing, unless KGEVAL_REQUIRE_POSTGRES is set (``.ci/run`` sets it, so CI cannot pass by skipping)."""
    bindir = server_binaries()
    missing = "PostgreSQL server binaries (initdb)" if bindir is None else None
    try:
        import psycopg  # noqa: F401 -- the driver the storage URL names
    except ImportError:
        missing = missing or "psycopg (pip install 'kgeval[postgres]')"
    if missing:
        if os.environ.get("KGEVAL_REQUIRE_POSTGRES"):
            pytest.fail(f"KGEVAL_REQUIRE_POSTGRES is set but {missing} is missing")
        pytest.skip(f"needs {missing}")
    with postgres_cluster(bindir) as url:
        yield url
