"""Credentials in storage URLs (issue 31, class 6): every form a driver reads is masked wherever kgeval prints,
saves or passes on a URL. Before, only ``user:password@`` was: ``?password=`` reached the ``resume:`` line and
``best_pipeline_config.json``."""

from __future__ import annotations

import json
import warnings

import pytest
from click.testing import CliRunner

optuna = pytest.importorskip("optuna")

from kgeval.workflow import study as study_mod  # noqa: E402
from kgeval.workflow.hpo import HPOResult, hpo_pipeline  # noqa: E402
from kgeval.workflow.study import StorageError, display_url, redact  # noqa: E402

SECRET = "Hunter2xyz"

# (URL, what is shown): every credential form PostgreSQL (libpq, psycopg), MySQL drivers and SQLAlchemy accept
FORMS = [
    (f"postgresql://me:{SECRET}@db:5432/hpo", "postgresql://me:***@db:5432/hpo"),
    (f"postgresql://me:a/{SECRET}@db/hpo", "postgresql://me:***@db/hpo"),  # '/' in the password: missed before
    (f"postgresql://me:{SECRET}:b@db/hpo", "postgresql://me:***@db/hpo"),
    (f"postgresql://me@db/hpo?password={SECRET}", "postgresql://me@db/hpo?password=***"),
    (f"postgresql://me@db/hpo?sslmode=require&PassWord={SECRET}&x=1",
     "postgresql://me@db/hpo?sslmode=require&PassWord=***&x=1"),
    (f"postgresql://me@db/hpo?pass%77ord={SECRET}", "postgresql://me@db/hpo?pass%77ord=***"),  # percent-encoded name
    (f"postgresql://me@db/hpo?sslpassword={SECRET}", "postgresql://me@db/hpo?sslpassword=***"),
    (f"postgresql://me@db/hpo?passfile=/home/me/{SECRET}", "postgresql://me@db/hpo?passfile=***"),
    (f"mysql+mysqldb://me@db/hpo?passwd={SECRET}", "mysql+mysqldb://me@db/hpo?passwd=***"),
    (f"mysql+pymysql://me@db/hpo?pwd={SECRET}", "mysql+pymysql://me@db/hpo?pwd=***"),
    (f"postgresql://me@db/hpo?options=-c%20password%3D{SECRET}", "postgresql://me@db/hpo?options=-c%20password=***"),
    (f"postgresql://me@db/hpo?dsn=host%3Ddb+password%3D%27{SECRET}+x%27",
     "postgresql://me@db/hpo?dsn=host=db%20password=***"),
    (f"host=db password={SECRET} user=me", "host=db password=*** user=me"),  # a libpq keyword string, no URL
    (f"host=db password = '{SECRET} \\' x' user=me", "host=db password = *** user=me"),
    (f"PGPASSWORD={SECRET} postgresql://me@db/hpo", "PGPASSWORD=*** postgresql://me@db/hpo"),
]


@pytest.mark.parametrize(("url", "shown"), FORMS)
def test_every_credential_form_is_masked(url, shown):
    assert display_url(url) == shown
    assert SECRET not in display_url(url)


@pytest.mark.parametrize("url", ["postgresql://me@db.example:5432/hpo?sslmode=require&application_name=kgeval",
                                 "sqlite:////tmp/a:b@c.db", "sqlite:///hpo.db?timeout=5", "sqlite://"])
def test_urls_without_credentials_are_shown_as_they_are(url):
    assert display_url(url) == url


#: the forms whose credential is exactly SECRET (a driver's message would quote the whole credential)
WHOLE = [url for url, _ in FORMS if not any(part in url for part in ("a/", ":b@", "/home/me/", "\\'", "+x"))]


@pytest.mark.parametrize("url", WHOLE)
def test_driver_messages_quoting_a_credential_are_redacted(url):
    message = f"FATAL: invalid command-line argument for server process: password={SECRET} near '{SECRET}'"
    assert SECRET not in redact(message, url)
    assert redact(f"cannot connect to {url}", url) == f"cannot connect to {display_url(url)}"


def test_a_keyword_string_as_storage_is_refused_without_its_password():
    with pytest.raises(StorageError) as err:
        study_mod.check_storage(f"host=db password={SECRET}")
    assert SECRET not in str(err.value)  # before: "storage 'host=db password=Hunter2xyz' is not a database URL"


@pytest.mark.parametrize("url", [f"postgresql://me@db/hpo?password={SECRET}", f"postgresql://me:{SECRET}@db/hpo"])
def test_resume_hint_and_summary_mask_the_query_password(url):
    res = HPOResult(study=None, metric="mrr", direction="maximize", storage=url, study_name="s")
    assert SECRET not in res.resume_hint() and SECRET not in res.shown_storage


def test_query_password_never_printed_or_saved(postgres_url, tmp_path):
    """The whole search through a real server with ``?password=``: the CLI's output and every saved file."""
    url = postgres_url + ("&" if "?" in postgres_url else "?") + f"password={SECRET}"  # trust auth: ignored
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run("hpo", "--dataset", "nations", "--model", "distmult", "--sampler", "random", "--pruner", "none",
                  "--trials", "1", "--epochs", "1", "--storage", url, "--study-name", "secret", "-o", tmp_path)
    assert res.exit_code == 0, res.output
    assert "resume: run again with --storage" in res.output and "password=***" in res.output
    assert SECRET not in res.output
    for path in tmp_path.iterdir():
        assert SECRET not in path.read_text(), path.name
    assert json.loads((tmp_path / "best_pipeline_config.json").read_text())["storage"] == display_url(url)


def test_a_saved_file_of_an_older_kgeval_is_not_quoted_raw(tmp_path):
    """An older kgeval saved ``?password=`` unmasked; refusing its directory must not print it."""
    (tmp_path / "best_pipeline_config.json").write_text(json.dumps(
        {"study_name": "other", "storage": f"postgresql://me@db/hpo?password={SECRET}"}))
    with pytest.raises(Exception, match="holds the results of") as err:
        hpo_pipeline(dataset="nations", model="distmult", epochs=1, n_trials=1, output_dir=tmp_path,
                     storage=f"sqlite:///{tmp_path / 'h.db'}", study_name="mine")
    assert SECRET not in str(err.value)


def run(*args):
    """``kgeval ARGS...`` in-process (click's CliRunner)."""
    from kgeval.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])
