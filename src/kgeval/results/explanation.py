"""The answer of :func:`kgeval.explain`: :class:`Explanation`, as text and as JSON.

The text puts the verdict first (are the two numbers about the same test triples at all?), then each
protocol difference, then the effect table: one row per measured difference (its effect alone), the sum
of those rows, the effect of all differences together, the interaction (together - sum) and, where both
sides' values are known, the total difference and what the measured differences leave unexplained.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .effects import Effects
from .protocol_diff import Difference

__all__ = ["Explanation"]

_FACET_WORDS = {"rank_type": "rank type", "ties": "ties", "nan": "NaN scores", "filter": "filter sets", "sides": "sides",
                "unseen": "unseen entities", "candidates": "candidates", "weights": "weights",
                "restriction": "restriction"}


@dataclass
class Explanation:
    """Why two evaluations' numbers differ (see :func:`kgeval.explain`)."""

    a: str
    b: str
    comparable: bool | None
    verdict: str
    differences: list[Difference]
    unknown: list[str]
    values_a: dict[str, float] | None
    values_b: dict[str, float] | None
    metrics: tuple[str, ...]
    effects: Effects | None = None
    #: facet -> why its effect was not measured
    not_measured: dict[str, str] = field(default_factory=dict)
    #: the side whose rank table the differences were applied to
    measured_from: str | None = None

    def effect(self, facet: str, metric: str = "mrr") -> float | None:
        """The measured effect of one difference alone on ``metric`` (b's setting minus a's), None if not measured."""
        if self.effects is None or facet not in self.effects.single:
            return None
        return self.effects.single[facet].get(metric)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "comparable": self.comparable, "verdict": self.verdict,
                "differences": [{**d.to_dict(), "effect": None if self.effects is None
                                 else self.effects.single.get(d.facet),
                                 "not_measured": self.not_measured.get(d.facet)} for d in self.differences],
                "not_stated": list(self.unknown), "values_a": self.values_a, "values_b": self.values_b,
                "effects": None if self.effects is None else self.effects.to_dict(),
                "measured_from": self.measured_from}

    def __str__(self) -> str:
        return self.to_text()

    def to_text(self) -> str:
        from .._escape import plain_text

        lines = [f"A: {plain_text(self.a)}{_values(self.values_a)}", f"B: {plain_text(self.b)}{_values(self.values_b)}",
                 self.verdict]
        if not self.differences:
            lines.append("no protocol difference" + (f" (not stated by one side: {', '.join(self.unknown)})"
                                                    if self.unknown else ""))
            return "\n".join(lines)
        lines.append(f"differences ({len(self.differences)}):")
        width = max(len(_FACET_WORDS.get(d.facet, d.facet)) for d in self.differences)
        for d in self.differences:
            lines.append(f"  {_FACET_WORDS.get(d.facet, d.facet).ljust(width)}  "
                         f"{plain_text(d.a)} vs {plain_text(d.b)}")
        if self.effects is not None:
            lines += ["", *self._effect_lines()]
        for facet, why in self.not_measured.items():
            lines.append(f"not measured: {_FACET_WORDS.get(facet, facet)}: {why}")
        if self.unknown:
            lines.append("not stated by one side (could differ): "
                         + ", ".join(_FACET_WORDS.get(u, u) for u in self.unknown))
        return "\n".join(lines)

    def _effect_lines(self) -> list[str]:
        e = self.effects
        head = ["effect (B's setting - A's)", *e.metrics]
        rows = [[_FACET_WORDS.get(f, f), *(_signed(v[m]) for m in e.metrics)] for f, v in e.single.items()]
        if len(e.single) > 1:
            rows.append(["sum of the single effects",
                         *(_signed(sum(v[m] for v in e.single.values())) for m in e.metrics)])
            rows.append(["all together", *(_signed(e.joint[m]) for m in e.metrics)])
            rows.append(["interaction (together - sum)", *(_signed(e.interaction[m]) for m in e.metrics)])
        if e.total is not None:
            rows.append(["total (B - A)", *(_signed(e.total.get(m)) for m in e.metrics)])
            rows.append(["unexplained (total - together)", *(_signed(e.unexplained.get(m)) for m in e.metrics)])
        table = [head, *rows]
        widths = [max(len(r[i]) for r in table) for i in range(len(head))]
        out = [f"measured from {self.measured_from}'s rank table:"]
        for i, r in enumerate(table):
            out.append("  " + "  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in
                                        enumerate(zip(r, widths))))
            if i == 0:
                out.append("  " + "  ".join("-" * w for w in widths))
        out += [f"  note: {_FACET_WORDS.get(f, f)}: {n}" for f, n in e.notes.items()]
        return out


def _signed(x) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    return f"{x:+.4f}" if abs(x) >= 1e-4 else f"{x:+.2e}"


def _values(values) -> str:
    if not values:
        return ""
    return " (" + ", ".join(f"{k} {v:.4f}" for k, v in values.items()) + ")"
