"""What a report shows, gathered from saved runs: :func:`build_report` -> :class:`Report`.

Every number is computed from the run's ``rank_table.npz`` (its ``results.json`` must agree,
else the run is refused by name: one source of truth for every number shown); the writers
(:mod:`.html`, :mod:`.text`) only format them.
A headline row holds, for one side and the realistic rank type: the metric's value, its
confidence interval (bootstrap over evaluation triples), its adjusted index
``(M - E[M]) / (opt - E[M])``, its z-score ``(M - E[M]) / sqrt(Var[M])`` and the one-sided
p-value of a value at least as good under the null model (ranks uniform on 1..C_i).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import metrics as _metrics
from ..errors import InvalidInputError
from ..keys import flat_key
from ..metrics.derived import DerivedMetric, wrapper_key
from . import stats
from .breakdowns import category_table
from .setup import RANK_TYPE, Labels, configuration_line, dataset_labels, example_rows, setup_rows

FORMATS = ("html", "md", "latex", "csv", "json")
#: who asked for the report: its notes name that interface's options (``num_resamples=`` or ``--resamples``)
INTERFACES = ("python", "cli")
#: the base metrics of the headline table (their adjusted index and z-score sit beside them)
HEADLINE_BASES = ("mrr", "hits@1", "hits@3", "hits@10", "mr", "igmr")


@dataclass
class RunReport:
    """One run: where it is, what was trained on what, its protocol and its numbers."""

    name: str
    directory: Path
    model: str
    dataset: str
    num_entities: int | None
    protocol: str
    results: object
    headline: list[dict] = field(default_factory=list)
    relations: list[dict] = field(default_factory=list)
    #: the split the numbers were measured on, and the training configuration in one line
    split: str = "test"
    configuration: str = ""
    #: what a methods section states of the run, as (what, text) rows: the evaluated split, the
    #: candidates and filter sets, the rank type, the model, its training, optimiser and seed
    setup: list = field(default_factory=list)
    #: the worst-ranked evaluation tasks, with entity and relation labels (ids where the dataset has none)
    examples: list[dict] = field(default_factory=list)
    #: the figure metric per relation category and side (:mod:`.breakdowns`): ``{"rule", "rows", "notes"}``
    categories: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The run's name without `` on <dataset>``: the model (and directory where a model has several runs)."""
        return run_label(self)


@dataclass
class Report:
    """Every run of a report, the figure metric, the comparison table and the notes."""

    runs: list[RunReport]
    metric: str
    confidence: float
    comparison: list[dict] | None
    notes: list[str]
    #: the resampling the numbers came from (stated in the report's reproduction line)
    num_resamples: int | None = None
    seed: int | None = None
    #: ``python`` or ``cli``: whose terms the notes and the reproduction line are written in
    interface: str = "python"
    #: ``{dataset: verdict lines}``: each dataset's diagnostics (unseen entities, leakage), shown at the top
    diagnostics: dict = field(default_factory=dict)

    def datasets(self) -> list[str]:
        """The runs' datasets, each once, smallest first (by number of entities, as Figure 1 orders them),
        else in the order of their first run."""
        order = list(dict.fromkeys(r.dataset for r in self.runs))
        size = {d: min((r.num_entities or 0) for r in self.runs if r.dataset == d) for d in order}
        return sorted(order, key=lambda d: (size[d], order.index(d)))

    def grouped(self) -> list[tuple[str, list[RunReport]]]:
        """``[(dataset, its runs)]``: the runs by dataset, datasets and runs in the order given."""
        return [(d, [r for r in self.runs if r.dataset == d]) for d in self.datasets()]

    def to_dict(self) -> dict:
        """The JSON form (``--format json``): runs with their tables, comparison, notes."""
        return {
            "metric": self.metric,
            "confidence": self.confidence,
            "num_resamples": self.num_resamples,
            "seed": self.seed,
            "interface": self.interface,
            "runs": [{"name": r.name, "directory": str(r.directory), "model": r.model, "dataset": r.dataset,
                      "split": r.split, "configuration": r.configuration, "setup": dict(r.setup),
                      "protocol": r.protocol, "headline": r.headline, "relations": r.relations,
                      "examples": r.examples, "categories": r.categories} for r in self.runs],
            "comparison": self.comparison,
            "notes": self.notes,
            "diagnostics": self.diagnostics,
        }


def run_label(run) -> str:
    """A run's name without `` on <dataset>`` (``distmult``, ``distmult (seed42)``): how a table grouped by
    dataset, and Figure 1's legend, name it."""
    label = str(run.name).replace(f" on {run.dataset}", "", 1)
    return label if label.strip() else str(run.name)


def base_metric(name: str):
    """The metric named ``name`` (an adjusted or z variant stands for its base metric)."""
    metric = _metrics.get(name)
    return metric.base if isinstance(metric, DerivedMetric) else metric


def derived_keys(metric, *, needs: tuple[str, ...] = ("index", "z")) -> tuple[str, str]:
    """The keys of the adjusted index and the z-score of a base metric; a metric without one of
    ``needs`` (count, median rank, variance, ...) raises :class:`InvalidInputError` saying so."""
    keys = wrapper_key("index", metric.key, metric.increasing), wrapper_key("z", metric.key, metric.increasing)
    missing = [what for kind, what, key in zip(("index", "z"), ("adjusted index", "z-score"), keys)
               if kind in needs and not _known(key)]
    if missing:
        # was "unknown metric 'z_median_rank'" (for --metric median_rank), while drawing the figures
        with_both = [m for m in _metrics.names() if not m.startswith(("adjusted_", "z_")) and _has_both(m)]
        what = "the report's figures need" if "z" in needs else "the per-relation table needs"
        raise InvalidInputError(f"{what} a metric with an {' and a '.join(missing)}; {metric.key} has no "
                                f"{' and no '.join(missing)}. Metrics with an adjusted index and a z-score: "
                                f"{', '.join(with_both)}")
    return keys


def _known(key: str) -> bool:
    try:
        _metrics.get(key)
    except KeyError:
        return False
    return True


def _has_both(name: str) -> bool:
    metric = _metrics.get(name)
    return all(_known(wrapper_key(kind, metric.key, metric.increasing)) for kind in ("index", "z"))


def load_results(directory: str | os.PathLike):
    """``(Run, Results)`` of a run directory, every number computed from its rank table and checked
    against its ``results.json`` (:func:`kgeval.workflow.runs.load_run_results`); a directory
    that is not a run, or whose files disagree, raises :class:`InvalidInputError` naming it."""
    from ..workflow.runs import load_run_results

    return load_run_results(directory)


def _headline_rows(results, sides, *, confidence, num_resamples, seed, why=None) -> list[dict]:
    rows = []
    for side in sides:
        for name in HEADLINE_BASES:
            metric = base_metric(name)
            value = results.value(side, RANK_TYPE, metric.key)
            if value is None:
                continue
            adj_key, z_key = derived_keys(metric)
            key = flat_key(side, RANK_TYPE, metric.key)
            ci = stats.confidence_interval(results, key, confidence=confidence, num_resamples=num_resamples,
                                           seed=seed, why=why) if side == "both" else None
            p = stats.p_value(results, key)
            rows.append({
                "side": side, "metric": name, "key": key, "value": value,
                "ci_low": None if ci is None else ci[0], "ci_high": None if ci is None else ci[1],
                "adjusted_key": flat_key(side, RANK_TYPE, adj_key),
                "adjusted": results.value(side, RANK_TYPE, adj_key),
                "z_key": flat_key(side, RANK_TYPE, z_key), "z": results.value(side, RANK_TYPE, z_key),
                "p_key": flat_key(side, RANK_TYPE, f"p_{metric.key}"),
                "p": None if p is None else p[0], "log10_p": None if p is None else p[1],
                "p_method": None if p is None else p[2],
            })
    return rows


def relation_resamples(num_resamples: int, confidence: float) -> int:
    """Resamples of each per-relation interval: a fifth of ``num_resamples`` (there are many relations),
    but never fewer than an interval at ``confidence`` needs (:func:`~kgeval.significance.bootstrap.
    min_resamples`, BCa). ``max(1, num_resamples // 5)`` gave 1 resample for ``num_resamples`` 5-9:
    intervals that were one point (the relation's value itself), 4 at 20: the extreme resamples."""
    from ..significance.bootstrap import min_resamples

    return max(num_resamples // 5, min_resamples(confidence, "bca"))


def short_name(metric) -> str:
    """The name a paper's table gives a metric: ``MRR``, ``Hits@10``, ``MR``; its key where it has no short one.

    Examples
    --------
    >>> from kgeval import metrics
    >>> short_name(metrics.get("mrr")), short_name(metrics.get("hits@10")), short_name(metrics.get("count"))
    ('MRR', 'Hits@10', 'count')
    """
    if getattr(metric, "k", None) is not None and metric.key.startswith("hits_at_"):
        return f"Hits@{metric.k}"
    found = re.search(r"\(([A-Za-z0-9@]+)\)$", getattr(metric, "name", "") or "")
    return found.group(1) if found else metric.key


def _relation_rows(results, metric, *, confidence, num_resamples, seed, why=None, labels=None) -> list[dict]:
    from ..results import Results

    table = results.rank_table
    if table.relation is None or not table.has_entity_tasks:  # the per-relation rows are 'both' (head + tail)
        return []
    adj_key, _ = derived_keys(metric, needs=("index",))
    breakdown = results.by_relation((metric.key, "hits@10", "count"), rank_type=RANK_TYPE)
    rows = []
    for rel, values in sorted(breakdown.items()):
        sub_table = table.subset(table.relation == rel)
        sub = Results(sub_table, metrics=[metric.key, adj_key],
                      rank_types=[RANK_TYPE])
        # the bootstrap resamples evaluation triples: a relation with one triple has no interval
        ci = stats.confidence_interval(sub, flat_key("both", RANK_TYPE, metric.key), confidence=confidence,
                                       num_resamples=num_resamples, seed=seed,
                                       why=why) if _units(sub_table) > 1 else None
        rows.append({"relation": (labels or {}).get(int(rel), str(int(rel))), "relation_id": int(rel),
                     "count": int(values["count"]), "value": values[metric.key],
                     "hits_at_10": values.get("hits_at_10"), "adjusted": sub.value("both", RANK_TYPE, adj_key),
                     "ci_low": None if ci is None else ci[0], "ci_high": None if ci is None else ci[1]})
    return rows


def _units(table) -> int:
    """The number of evaluation triples of a rank table (its tasks where triples are not recorded)."""
    import numpy as np

    return len(table) if table.triple_index is None else len(np.unique(table.triple_index))


def _names(runs) -> list[str]:
    """``model on dataset`` labels, made unique with the directory name where they repeat."""
    labels = [f"{r.config.model.name} on {r.config.dataset}" for r in runs]
    names = [f"{lab} ({r.directory.name})" if labels.count(lab) > 1 else lab for lab, r in zip(labels, runs)]
    seen: dict[str, int] = {}
    unique = []
    for name in names:  # runs/a/seed42 and runs/b/seed42: still the same label
        seen[name] = seen.get(name, 0) + 1
        unique.append(f"{name} #{seen[name]}" if names.count(name) > 1 else name)
    return unique


def build_report(directories, *, metric: str = "mrr", confidence: float = 0.95, num_resamples: int = 1000,
                 seed: int | None = 0, interface: str = "python") -> Report:
    """Gather every run of ``directories`` (at least one) into a :class:`Report`.

    ``metric`` drives the figures and the per-relation table; ``num_resamples`` the bootstrap
    BCa intervals (kept modest: a report builds in seconds), at least ``10 / (1 − confidence)`` (200 at
    0.95); each per-relation interval takes a fifth of it, but no fewer than that minimum. An interval
    the bootstrap still refuses (a BCa tail beyond the resamples) is an empty cell and a note.
    ``directories``: run directories, or one. ``interface``: ``"python"`` (this function) or ``"cli"``
    (``kgeval report``): the notes and the line that says how to remake the report name that interface's
    arguments (``num_resamples=5000`` or ``--resamples 5000``).

    Every argument is checked here, before any work: the statistics below leave a cell empty where
    the significance API refuses it, so a bad ``seed`` (-1) gave a report with every interval cell
    empty and no comparison, said only in a note.
    """
    from .._validation import check_probability, check_seed
    from ..errors import unknown_name
    from ..significance.bootstrap import check_num_resamples

    if interface not in INTERFACES:
        raise unknown_name("interface", interface, INTERFACES)
    directories = _directories(directories)
    confidence = check_probability("confidence", confidence)
    # the intervals below leave a cell empty where the bootstrap refuses it: too few resamples must be
    # refused here, by name, not as a report without intervals
    num_resamples = check_num_resamples("num_resamples", num_resamples, confidence, "bca")
    seed = check_seed("seed", seed, allow_none=True)  # None: unseeded, as compare and confidence_interval take it
    base = base_metric(metric)
    derived_keys(base, needs=("index",))  # before loading and resampling: the per-relation table's adjusted index
    loaded = [load_results(d) for d in directories]
    names = _names([run for run, _ in loaded])
    reports, refused = [], []
    labels: dict = {}  # one dataset load per dataset, not per run (FB15k-237 is read from disk)

    def labels_of(run) -> Labels:
        hashes = (run.metadata.get("dataset") or {}).get("hashes") if isinstance(run.metadata, dict) else None
        key = (str(run.config.dataset), bool(run.config.drop_unseen), repr(sorted((hashes or {}).items())))
        if key not in labels:
            labels[key] = dataset_labels(run.config.dataset, hashes, drop_unseen=run.config.drop_unseen)
        return labels[key]

    for name, (run, results) in zip(names, loaded):
        rep = RunReport(name, run.directory, run.config.model.name, run.config.dataset,
                        results.protocol.get("num_entities"), results.evaluation_protocol.describe(), results,
                        split=run.config.evaluation.split,
                        configuration=configuration_line(run.config, run.metadata.get("source")),
                        setup=setup_rows(run, results))
        sides = sorted(results.sides, key=lambda s: s != "both")  # both sides first
        why: list[str] = []
        rep.headline = _headline_rows(results, sides, confidence=confidence,
                                      num_resamples=num_resamples, seed=seed, why=why)
        if why:
            refused.append(_refusal_note(name, "headline", why, sum(r["side"] == "both" for r in rep.headline),
                                         num_resamples, 1, confidence, interface))
        why, per_relation = [], relation_resamples(num_resamples, confidence)
        dataset = labels_of(run)
        rep.relations = _relation_rows(results, base, confidence=confidence, num_resamples=per_relation, seed=seed,
                                       why=why, labels=dataset.relations)
        rep.examples = example_rows(results, dataset, run.config.evaluation.split)
        # four categories at most: each interval takes the report's full resamples
        rep.categories = category_table(results, dataset.triples.get("training"), base.key, confidence=confidence,
                                        num_resamples=num_resamples, seed=seed)
        if rep.categories.get("refused"):
            refused.append(_refusal_note(name, "relation-category", rep.categories["refused"],
                                         len(rep.categories["rows"]), num_resamples, 1, confidence, interface))
        if why:
            refused.append(_refusal_note(name, "per-relation", why, len(rep.relations), per_relation, 5, confidence,
                                         interface))
        reports.append(rep)
    comparison, notes = stats.compare(reports, ("mrr", "hits@10", "mr", "gmr"), num_resamples=num_resamples,
                                      seed=seed, confidence=confidence)
    notes = [in_terms(n, interface) for n in notes]
    notes += refused  # an empty interval cell says why (it was silent)
    notes += [f"relations and entities of {d} are shown by id: {why}" for d, why in
              dict.fromkeys((str(k[0]), v.why) for k, v in labels.items() if v.why)]
    notes += [text for what, text in stats.MISSING.items() if not _available(what, loaded)]
    diagnostics = {str(k[0]): v.findings for k, v in labels.items() if v.findings}
    return Report(reports, base.key, confidence, comparison, notes, num_resamples=num_resamples, seed=seed,
                  interface=interface, diagnostics=diagnostics)


#: the options of this report as each interface spells them: (Python argument, CLI option)
_TERMS = (("num_resamples", "--resamples"), ("confidence", "--confidence"), ("seed", "--seed"),
          ("metric", "--metric"))


def argument(name: str, value, interface: str) -> str:
    """``num_resamples=5000`` (Python) or ``--resamples 5000`` (CLI).

    Examples
    --------
    >>> argument("num_resamples", 5000, "python"), argument("num_resamples", 5000, "cli")
    ('num_resamples=5000', '--resamples 5000')
    """
    if interface == "cli":
        return f"{dict(_TERMS)[name]} {value}"
    return f"{name}={value!r}"


def in_terms(text: str, interface: str) -> str:
    """A message of the statistics below (written for Python) in ``interface``'s terms: for the CLI,
    ``num_resamples=200`` is ``--resamples 200``; the advice to use ``method='percentile'``, which
    neither the report function nor ``kgeval report`` takes, is left out."""
    text = re.sub(r"[;,]? (?:or )?use method='percentile'", "", text)
    if interface != "cli":
        return text
    for name, option in _TERMS:
        text = re.sub(rf"\b{name}=(\S+?)(?=[\s,;)]|$)", rf"{option} \1", text)
        if "_" in name:  # num_resamples is never an English word; seed and confidence are
            text = re.sub(rf"(?<![-\w]){name}\b(?!=)", option, text)
    return text


def _refusal_note(name: str, what: str, why: list[str], total: int, resamples: int, share: int, confidence: float,
                  interface: str) -> str:
    """A note on intervals the bootstrap refused: how many, why in words, and the setting that fills them
    (``share``: a per-relation interval takes a fifth of the report's resamples)."""
    needs = [int(m.group(1)) for w in why for m in [re.search(r"needs at least (\d+) resamples", w)] if m]
    head = f"{name}: {len(why)} of {total} {what} intervals left empty"
    if len(needs) == len(why):
        level = f"{100 * confidence:g}%"
        return (f"{head}: {resamples} resamples each are too few for these BCa intervals at {level} (their bias "
                f"correction moves a tail beyond the resamples; the widest needs {max(needs):,}); rebuild with "
                f"{argument('num_resamples', share * max(needs), interface)} or more to fill them")
    return f"{head} ({in_terms(why[0], interface)})"


def _directories(directories) -> list:
    """The run directories as a list: one str / path is one directory (``list("runs/a")`` was its
    characters, "/ is not a kgeval run directory"; a Path, None or a number a TypeError)."""
    if isinstance(directories, (str, os.PathLike)):
        directories = [directories]
    elif isinstance(directories, bytes) or not hasattr(directories, "__iter__"):
        raise InvalidInputError(f"directories must be run directories (paths), got {type(directories).__name__}")
    directories = list(directories)
    if not directories:
        raise InvalidInputError("a report needs at least one run directory")
    for d in directories:
        if not isinstance(d, (str, os.PathLike)):
            raise InvalidInputError(f"a run directory must be a path (str or os.PathLike), got {d!r}")
    return directories


def _available(what: str, loaded) -> bool:
    if what == "compare":
        return True  # kgeval.significance.compare is part of this kgeval
    attr = {"ci": "confidence_interval", "p": "p_value"}[what]
    return all(hasattr(r, attr) for _, r in loaded)
