"""Dependency-free duck typing of objects from other libraries, for the core's error messages.

Nothing here imports the library it recognises; a check is a test of attributes only.
"""

from __future__ import annotations

__all__ = ["is_triples_factory", "install_hint"]


def is_triples_factory(obj) -> bool:
    """Whether ``obj`` looks like a PyKEEN (Core)TriplesFactory: it has ``mapped_triples``,
    ``num_entities`` and ``num_relations``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> is_triples_factory(SimpleNamespace(mapped_triples=None, num_entities=3, num_relations=1))
    True
    >>> is_triples_factory([[0, 0, 1]])
    False
    """
    return hasattr(obj, "mapped_triples") and hasattr(obj, "num_entities") and hasattr(obj, "num_relations")


def install_hint(extra: str, package: str | None = None) -> str:
    """The command that installs kgeval's optional ``extra``, spelled for an install from a clone.

    kgeval has no package-index release yet, so ``pip install kgeval[extra]`` would fail or fetch an
    unrelated package; every "needs X" message in kgeval uses this one spelling.

    Parameters
    ----------
    extra : str
        The extra of ``pyproject.toml`` (``hpo``, ``report``, ``pandas``, ``pykeen``, ``postgres``, ...).
    package : str, optional
        The package the extra brings, named as an alternative (``pip install optuna``).

    Returns
    -------
    str

    Examples
    --------
    >>> install_hint("hpo", "optuna")
    'pip install -e ".[hpo]" in a clone of kgeval (or pip install optuna)'
    >>> install_hint("report")
    'pip install -e ".[report]" in a clone of kgeval'
    """
    hint = f'pip install -e ".[{extra}]" in a clone of kgeval'
    return f"{hint} (or pip install {package})" if package else hint
