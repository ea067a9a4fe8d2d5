"""kgeval: exact, fast, comparable rank-based evaluation of link prediction on knowledge graphs.

The flow: triples -> filter index -> streaming evaluator -> :class:`RankTable` -> metrics ->
:class:`Results`. Heavy submodules are imported lazily so ``import kgeval`` stays fast.
"""

from __future__ import annotations

import importlib

from .errors import InvalidInputError, KGEvalError, NoClosedFormError, UnknownNameError
from ._version import __version__
from .ranks import RankTable

_LAZY = {
    "Results": ("kgeval.results", "Results"),
    "evaluate": ("kgeval.evaluation", "evaluate"),
    "KnownTriples": ("kgeval.evaluation", "KnownTriples"),
    "pipeline": ("kgeval.workflow.pipeline", "pipeline"),
    "replicates": ("kgeval.workflow.pipeline", "replicates"),
    "PipelineConfig": ("kgeval.workflow.config", "PipelineConfig"),
    "hpo_pipeline": ("kgeval.workflow.hpo", "hpo_pipeline"),
    "metrics": ("kgeval.metrics", None),
    "compare": ("kgeval.workflow.comparison", "compare"),
    "explain": ("kgeval.workflow.explain", "explain"),  # reads run directories too
    "diagnose": ("kgeval.data.diagnostics", "diagnose"),
    "null_model": ("kgeval.significance.null_model", "null_model"),
    "adjust": ("kgeval.significance.adjust", "adjust"),
}

__all__ = ["RankTable", "KGEvalError", "InvalidInputError", "UnknownNameError", "NoClosedFormError", "__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'kgeval' has no attribute {name!r}")
