"""Models trained elsewhere: adapters and converters (pykeen, LibKGE, plain arrays); each module imports its
library only when used.

Evaluating such a model and saving it as a kgeval run is :mod:`kgeval.workflow.foreign`.

- :func:`from_pykeen` (:mod:`.pykeen_convert`): a trained PyKEEN model as a kgeval model with the same scores.
"""

from __future__ import annotations

__all__ = ["from_pykeen"]


def __getattr__(name: str):
    if name == "from_pykeen":  # lazily: it needs torch
        from .pykeen_convert import from_pykeen

        return from_pykeen
    raise AttributeError(f"module 'kgeval.interop' has no attribute {name!r}")
