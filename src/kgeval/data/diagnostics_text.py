"""The words of a :class:`~kgeval.data.diagnostics.Diagnosis`: one verdict line per finding and a readable table."""

from __future__ import annotations

#: relation pairs listed by name in the table (the JSON form holds them all)
SHOWN_PAIRS = 10


def _share(count: int, total: int) -> str:
    return f"{count:,} of {total:,} ({100 * count / total:.1f}%)" if total else f"{count:,}"


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _split_verdicts(s) -> list[str]:
    name, n = s.split, s.num_triples
    out = []
    if s.triples_with_unseen_entity:
        out.append(f"{name}: {_share(s.triples_with_unseen_entity, n)} triples contain an entity unseen in training "
                   f"({_count(s.unseen_entities, 'entity', 'entities')} in all): their ranks say nothing about the "
                   "model, and keeping or dropping them (drop_unseen) moves the headline numbers")
    else:
        out.append(f"{name}: every entity occurs in training")
    if s.triples_with_unseen_relation:
        out.append(f"{name}: {_share(s.triples_with_unseen_relation, n)} triples have a relation unseen in training "
                   f"({_count(s.unseen_relations, 'relation', 'relations')} in all)")
    if s.in_training:
        out.append(f"{name}: {_share(s.in_training, n)} triples are training triples too")
    if s.reverse_in_training:
        out.append(f"{name}: reverse leakage: {_share(s.reverse_in_training, n)} triples (h, r, t) have a training "
                   "triple (t, r', h): a rule from the reverse can answer them (the rule baseline measures how well)")
    else:
        out.append(f"{name}: no reverse leakage (no triple's reverse is in training)")
    if s.duplicate_in_training:
        out.append(f"{name}: duplicate leakage: {_share(s.duplicate_in_training, n)} triples (h, r, t) have a "
                   "training triple (h, r', t) with another relation r'")
    else:
        out.append(f"{name}: no duplicate leakage (no triple's pair is in training under another relation)")
    return out


def verdicts(d) -> list[str]:
    """One line per finding of ``d``, with its count and share."""
    out = []
    for s in d.splits.values():
        out += _split_verdicts(s)
    where = "all splits" if d.relations_on == "all" else "training"
    kinds = {"inverse": "inverse relation pairs", "duplicate": "duplicate relation pairs",
             "symmetric": "symmetric relations"}
    for kind, words in kinds.items():
        found = d.pairs(kind)
        out.append(f"{where}: {_count(len(found), words[:-1], words)} at Jaccard >= {d.threshold:g}"
                   + (": a model can copy one from the other" if found and kind != "symmetric" else "")
                   + (": each triple's reverse predicts it" if found and kind == "symmetric" else ""))
    c = d.cartesian
    share = sum(x.num_triples for x in c)
    out.append(f"{where}: {_count(len(c), 'Cartesian-product relation', 'Cartesian-product relations')} (triples fill >= {100 * d.cartesian_threshold:g}% "
               f"of heads x tails)" + (f", {share:,} triples" if c else ""))
    return out


def render(d) -> str:
    """The diagnosis as a readable text table: the splits' counts, the verdicts, then the relation pairs."""
    where = "all splits" if d.relations_on == "all" else "training"
    header = ["split", "triples", "unseen entities", "with unseen entity", "in training", "reverse in training",
              "duplicate in training"]
    rows = [[s.split, f"{s.num_triples:,}", f"{s.unseen_entities:,}", _share(s.triples_with_unseen_entity,
             s.num_triples), _share(s.in_training, s.num_triples), _share(s.reverse_in_training, s.num_triples),
             _share(s.duplicate_in_training, s.num_triples)] for s in d.splits.values()]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = [f"dataset: {d.dataset} ({d.num_entities:,} entities, {d.num_relations:,} relations, "
             f"{d.num_training:,} distinct training triples)", "",
             "  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines += ["", "findings:"] + [f"- {v}" for v in verdicts(d)]
    if d.relation_pairs:
        lines += ["", f"relation pairs (Jaccard of their (head, tail) sets in {where}; the {SHOWN_PAIRS} strongest):"]
        for p in d.relation_pairs[:SHOWN_PAIRS]:
            other = "itself" if p.kind == "symmetric" else (p.second_label or str(p.second))
            lines.append(f"  {p.kind:<9} {p.jaccard:.3f}  {p.first_label or p.first}  ~  {other}")
    if d.cartesian:
        lines += ["", f"Cartesian-product relations (the {SHOWN_PAIRS} largest):"]
        for c in d.cartesian[:SHOWN_PAIRS]:
            lines.append(f"  {c.label or c.relation}: {c.num_triples:,} triples = {100 * c.ratio:.1f}% of "
                         f"{c.num_heads:,} heads x {c.num_tails:,} tails")
    return "\n".join(lines)
