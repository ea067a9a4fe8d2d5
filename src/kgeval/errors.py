"""Exceptions raised by kgeval.

Every user mistake surfaces as one of these, with a message that names the problem,
instead of a traceback from deep inside numpy or torch.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class KGEvalError(Exception):
    """Base class of all kgeval errors."""


class InvalidInputError(KGEvalError, ValueError):
    """Input data (ranks, scores, triples, weights, files) is malformed."""


class NaNScoresError(InvalidInputError):
    """The scorer returned NaN for a true answer or a candidate under ``nan_policy="raise"``."""


class UnknownNameError(KGEvalError, KeyError):
    """A metric, dataset, model or option name is not known."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class NoClosedFormError(KGEvalError):
    """A metric has no closed-form expectation/variance and no approximation was requested."""


def plural(kind: str) -> str:
    """English plural of the last word of ``kind`` ("entity" -> "entities", "metric" -> "metrics")."""
    if kind.endswith("y") and kind[-2:-1] not in ("a", "e", "i", "o", "u", ""):
        return kind[:-1] + "ies"
    return kind + ("es" if kind.endswith(("s", "x", "ch", "sh")) else "s")


def unknown_name(kind: str, name: str, choices: Iterable[str]) -> UnknownNameError:
    """Build an :class:`UnknownNameError` that suggests the closest known names."""
    choices = sorted(set(choices))
    close = difflib.get_close_matches(str(name).lower(), choices, n=5, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return UnknownNameError(
        f"unknown {kind} {name!r}.{hint} Known {plural(kind)}: {', '.join(choices[:40])}"
        + (" ..." if len(choices) > 40 else "")
    )
