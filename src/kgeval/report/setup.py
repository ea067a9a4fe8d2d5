"""A run's setup as a methods section states it, and its worst-ranked tasks with labels.

:func:`setup_rows` and :func:`configuration_line` read a run's ``config.json`` and protocol record;
:func:`dataset_labels` loads the entity and relation labels of the dataset the run used (none where its split
hashes differ); :func:`example_rows` picks the worst-ranked tasks from the rank table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RANK_TYPE = "realistic"


def _option_text(name: str, value) -> str:
    """One option of a configuration as a methods section writes it (``dim 200``, ``inverse relations``)."""
    words = name.replace("_", " ")
    if value is True:
        return words
    if value is False:
        return f"no {words}"
    return f"{words} {value}"


def _options(options) -> str:
    return ", ".join(_option_text(k, v) for k, v in options.items() if v is not None)


def _plural(n, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def configuration_line(config, source: dict | None = None) -> str:
    """The training configuration of a run in one line, as a methods section states it; a model trained
    elsewhere (``config.json``'s ``source``: a LibKGE checkpoint, embedding files, a PyKEEN directory)
    says so instead of listing kgeval's training defaults it was never trained with."""
    model = config.model.name + (f" ({_options(config.model.options)})" if _options(config.model.options) else "")
    if source:
        return f"{model}; trained elsewhere ({_source_text(source)})"
    if _is_baseline(config.model.name):
        return f"{model}; not trained (a baseline counted on the training split); seed {config.seed}"
    training = _options(config.training.options)
    stop = config.early_stopping
    return (f"{model}; {config.training.loop} training, {_plural(config.training.epochs, 'epoch')}"
            + (f", {training}" if training else "")
            + (f", early stopping ({_options(stop.options) or 'defaults'})" if stop is not None else "")
            + f"; {config.optimizer.name}, learning rate {config.optimizer.lr}; seed {config.seed}")


def _is_baseline(name: str) -> bool:
    """Whether the run's model is a non-trained baseline (:mod:`kgeval.models.baselines`)."""
    from ..models import baseline_names

    return str(name).lower() in baseline_names()


def _source_text(source: dict) -> str:
    library = source.get("library", "another library")
    where = source.get("checkpoint") or source.get("directory") or source.get("entity")
    return f"{library}: {where}" if where else str(library)


def setup_rows(run, results) -> list[tuple[str, str]]:
    """What a methods section states of a run, as ``(what, text)`` rows: the evaluated split and its size,
    the candidates and filter sets, the rank type, then the model, its training, optimiser and seed."""
    config, protocol = run.config, results.protocol
    split = config.evaluation.split
    sides = list(protocol.get("sides") or [])
    what = {("head", "tail"): "head and tail prediction", ("tail",): "tail prediction only",
            ("head",): "head prediction only"}.get(tuple(sides), " and ".join(sides) + " prediction")
    triples, tasks = protocol.get("num_evaluated_triples") or protocol.get("num_triples"), protocol.get("num_tasks")
    rows = [("evaluated", f"the {split} split of {run.config.dataset}"
             + (f": {_plural(triples, 'triple')}, {what}" if triples else "")
             + (f" ({_plural(tasks, 'ranking task')})" if tasks else ""))]
    rows.append(("candidates", _candidates_text(protocol, split)))
    restriction = protocol.get("restriction") or {}
    if restriction.get("entities") or restriction.get("relations") or restriction.get("num_triples_dropped"):
        rows.append(("restricted to", "; ".join(
            [f"{k} {', '.join(map(str, v))}" for k, v in restriction.items() if k in ("entities", "relations") and v]
            + ([f"{restriction['num_triples_dropped']:,} triples dropped"] if restriction.get("num_triples_dropped")
               else []))))
    unseen = protocol.get("unseen") or {}
    if unseen.get("entities") or unseen.get("relations"):
        entities = unseen.get("entities", 0)
        rows.append(("unseen in training", f"{entities:,} {'entity' if entities == 1 else 'entities'}, "
                     f"{_plural(unseen.get('relations', 0), 'relation')} ({unseen.get('policy', 'kept')})"))
    rows.append(("ranks", f"{RANK_TYPE}: the mean of the optimistic and the pessimistic rank (ties count half)"))
    source = run.metadata.get("source") if isinstance(getattr(run, "metadata", None), dict) else None
    model = config.model.name + (f", {_options(config.model.options)}" if _options(config.model.options) else "")
    rows.append(("model", model))
    if source:
        rows.append(("trained", f"elsewhere ({_source_text(source)})"))
        return rows
    if _is_baseline(config.model.name):
        rows.append(("trained", f"not trained: the {config.model.name} baseline counted on the training split"))
        return rows
    training = _options(config.training.options)
    rows.append(("training", f"{config.training.loop}, {_plural(config.training.epochs, 'epoch')}"
                 + (f", {training}" if training else "")))
    if config.early_stopping is not None:
        rows.append(("early stopping", _options(config.early_stopping.options) or "kgeval's defaults"))
    rows.append(("optimizer", f"{config.optimizer.name}, learning rate {config.optimizer.lr}"))
    rows.append(("seed", str(config.seed)))
    return rows


def _candidates_text(protocol: dict, split: str) -> str:
    """``filtered: every entity but the other known answers (training, validation and test triples; 1,992 in all)``."""
    if not protocol.get("filtered"):
        return "raw (unfiltered): every entity, known true triples included"
    record = protocol.get("filter") or {}
    names = [split if s.get("name") == "evaluation" else str(s.get("name")) for s in record.get("sets", [])]
    names = list(dict.fromkeys(names))
    sets = (", ".join(names[:-1]) + " and " + names[-1]) if len(names) > 1 else "".join(names)
    known = record.get("num_known_triples")
    return ("filtered: every entity but the other known true answers of the query"
            + (f" (known: the {sets} triples" + (f", {known:,} in all)" if known else ")") if sets else ""))


@dataclass
class Labels:
    """A dataset's labels (``{id: label}``; empty where it has none of its own) and its triples by split."""

    relations: dict = field(default_factory=dict)
    entities: dict = field(default_factory=dict)
    triples: dict = field(default_factory=dict)
    why: str | None = None
    #: the dataset's diagnostics, one verdict per finding (:func:`kgeval.data.diagnostics.diagnose`)
    findings: list = field(default_factory=list)


def relation_labels(dataset) -> dict[int, str]:
    """``{relation id: label}`` of a run's dataset; empty (ids are shown) where it cannot be loaded
    or its relations have no labels of their own."""
    return dataset_labels(dataset).relations


def dataset_labels(dataset, hashes: dict | None = None, *, drop_unseen: bool = False) -> Labels:
    """The labels of a run's dataset, loaded by name; none (ids are shown) where it cannot be loaded, or
    where ``hashes`` (the run's ``config.json`` split hashes) say it is not the dataset the run used:
    a label is only shown where it is the label of that id in the run's own data."""
    from ..data import get_dataset
    from ..data.diagnostics import diagnose

    try:
        ds = get_dataset(dataset, drop_unseen=drop_unseen)
        current = ds.hashes() if hashes else {}
    except Exception:  # noqa: BLE001 - a report never fails for want of labels
        return Labels(why=f"dataset {dataset} could not be loaded here")
    if hashes and any(k in current and hashes[k] != current[k] for k in hashes):
        return Labels(why=f"the dataset {dataset} found here is not the one the run used (its split hashes differ)")
    out = Labels(triples={"test": ds.testing, "validation": ds.validation, "training": ds.training})
    try:
        out.findings = diagnose(ds).verdicts()
    except Exception:  # noqa: BLE001 - a report never fails for want of diagnostics (a custom split without test)
        out.findings = []
    for kind, labels in (("relations", ds.relation_labels), ("entities", ds.entity_labels)):
        named = {i: str(label) for i, label in enumerate(labels or [])}
        setattr(out, kind, {} if all(label == str(i) for i, label in named.items()) else named)
    return out


#: the worst-ranked tasks shown per run
NUM_EXAMPLES = 5


def example_rows(results, labels: Labels, split: str, k: int = NUM_EXAMPLES) -> list[dict]:
    """The ``k`` worst-ranked evaluation tasks (largest realistic rank relative to the candidates, then
    largest rank), as labelled triples with the side predicted; empty where the rank table does not
    record its triples or they do not match the dataset's ``split`` (then ids would be guessed)."""
    import numpy as np

    table = results.rank_table
    triples = labels.triples.get(split)
    dropped = ((getattr(results, "protocol", None) or {}).get("restriction") or {}).get("num_triples_dropped")
    if table is None or table.triple_index is None or table.relation is None or triples is None or dropped:
        return []  # a restricted evaluation's triple_index counts the kept triples, not the split's
    index = np.asarray(table.triple_index)
    triples = np.asarray(triples)
    if len(index) == 0 or index.max() >= len(triples) or not np.array_equal(triples[index, 1],
                                                                            np.asarray(table.relation)):
        return []
    ranks, cs = np.asarray(table.ranks(RANK_TYPE), dtype=float), np.asarray(table.num_candidates, dtype=float)
    order = np.lexsort((np.arange(len(ranks)), -ranks, -ranks / cs))[:k]
    sides = table.side if table.side is not None else np.full(len(ranks), -1)

    def name(kind, i):
        return getattr(labels, kind).get(int(i), str(int(i)))

    rows = []
    for j in order:
        h, r, t = triples[index[j]]
        side = {0: "head", 1: "tail", 2: "relation"}.get(int(sides[j]), "—")  # what was ranked
        rows.append({"head": name("entities", h), "relation": name("relations", r), "tail": name("entities", t),
                     "side": side, "rank": float(ranks[j]), "num_candidates": int(cs[j])})
    return rows
