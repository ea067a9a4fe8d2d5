"""JSON form of :class:`~kgeval.results.Results`.

The file holds ``kgeval_version``, ``protocol``, ``metrics`` (flat ``side.rank_type.key`` ->
value, plus any extra values, plus the headline p-values against chance: ``to_flat_dict(p_values=True)``,
computed here, so a file without the rank table still has them) and ``null_moments`` (``{side: {base_key: {expected_value,
variance, exact}}}``), so a loaded result has everything a freshly computed one has except
the rank table (pass it to :meth:`Results.load_json` to compute further keys).

JSON has no NaN or infinity: a non-finite number is written as ``null`` (strict JSON, readable
by any parser), and ``null`` metric values are skipped on loading.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .._json import finite_or_none, json_default, write_atomic  # the package's one JSON hook
from .._json import read_json as _read_json
from ..errors import InvalidInputError
from ..metrics.base import NullMoments


def dumps(data: dict) -> str:
    """Strict JSON (``allow_nan=False``) after replacing non-finite numbers by null."""
    return json.dumps(finite_or_none(data), indent=2, sort_keys=True, default=json_default, allow_nan=False)


def to_json(results) -> dict:
    from .._version import __version__

    protocol = results.protocol.to_dict() if hasattr(results.protocol, "to_dict") else results.protocol
    return {
        "kgeval_version": __version__,
        "protocol": protocol,
        "metrics": results.to_flat_dict(p_values=True),
        "null_moments": {s: {k: m.to_dict() for k, m in per.items()} for s, per in results.null_moments.items()},
    }


def save_json(results, path: str | os.PathLike) -> Path:
    """Write the results atomically (a reader never sees half a file)."""
    return write_atomic(path, dumps(to_json(results)))


def parse(data, source: str = "results") -> tuple[dict, dict, dict[str, dict[str, NullMoments]]]:
    """``(protocol, flat metrics, null moments)`` from a :func:`to_json` document; a malformed one
    raises :class:`InvalidInputError` naming ``source`` and the problem."""

    def bad(problem: str) -> InvalidInputError:
        return InvalidInputError(f"{source}: not a kgeval results file ({problem})")

    if not isinstance(data, dict):
        raise bad(f"the top level is a {type(data).__name__}, not an object")
    flat, protocol, raw_null = data.get("metrics"), data.get("protocol") or {}, data.get("null_moments") or {}
    if not isinstance(flat, dict):
        raise bad("no 'metrics' object")
    if not isinstance(protocol, dict):
        raise bad("'protocol' is not an object")
    for k, v in flat.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise bad(f"metric {k!r} has the non-numeric value {v!r}")
    try:  # what every reader of the protocol does with it: a wrong type inside was a TypeError traceback there
        from ..protocol import EvaluationProtocol

        EvaluationProtocol.from_dict(protocol).describe()
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise bad(f"malformed 'protocol' ({exc})") from None
    try:
        null = {s: {k: NullMoments.from_dict(m) for k, m in per.items()} for s, per in raw_null.items()}
    except (AttributeError, TypeError, ValueError) as exc:
        raise bad(f"malformed 'null_moments' ({exc})") from None
    return protocol, {k: v for k, v in flat.items() if v is not None}, null


def read_json(path: str | os.PathLike):
    """The JSON document in ``path``; unreadable, non-UTF-8 or invalid JSON raises
    :class:`InvalidInputError` naming the file and the problem (check it with :func:`parse`)."""
    return _read_json(path, "a kgeval results file", allow_nan=False)
