"""Progress of the workflow's counted loops: replicates and search trials.

One :class:`Counter` per loop: a tqdm bar on stderr (``replicates 2/5``) whose postfix is the best value so
far (and whose run it was); a search also prints its header before the first trial and one line per finished
trial above the bar. The epoch bar of each run's training sits below it (tqdm places nested bars itself).
Only made when ``progress`` is on: with it off nothing is printed.
"""

from __future__ import annotations

import sys

from tqdm.auto import tqdm

from ..results.render import format_value


class Counter:
    """A bar counting ``total`` runs (``unit``), its postfix the best ``label`` so far (``larger`` is better)."""

    def __init__(self, total: int | None, *, desc: str, unit: str, label: str, larger: bool = True):
        self.label, self.larger, self.best = label, larger, None
        self.bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)

    @staticmethod
    def write(line: str) -> None:
        """One line on stderr above the bars (they are redrawn below it)."""
        tqdm.write(line, file=sys.stderr)

    def done(self, line: str | None, value: float | None = None, *, of: str = "") -> None:
        """A run finished: its ``line`` (if any) above the bar; its ``value`` (None: none, e.g. pruned) counted
        towards the best so far, which is ``of`` (a name such as ``trial 3``)."""
        if value is not None and (self.best is None or (value > self.best[0] if self.larger else value < self.best[0])):
            self.best = (value, of)
        if line is not None:
            self.write(line)
        if self.best is not None:
            self.bar.set_postfix_str(" ".join(filter(None, ("best", self.label, format_value(self.best[0]))))
                                     + (f" ({self.best[1]})" if self.best[1] else ""), refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> Counter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TrialCounter(Counter):
    """A :class:`Counter` of search trials that is also an Optuna callback (``study.optimize(callbacks=[...])``);
    the values are the search's metric, which its header names."""

    def __init__(self, total: int, direction: str):
        super().__init__(total, desc="trials", unit="trial", label="", larger=direction == "maximize")

    def __call__(self, study, trial) -> None:
        state = trial.state.name.lower()
        params = ", ".join(f"{k}={format_value(v) if isinstance(v, float) else v}" for k, v in trial.params.items())
        if state == "complete":
            self.done(f"trial {trial.number}: {format_value(trial.value)} ({params})", trial.value,
                      of=f"trial {trial.number}")
        else:  # pruned (at the last epoch it reported) or failed
            at = f" at epoch {trial.last_step}" if state == "pruned" and trial.last_step is not None else ""
            self.done(f"trial {trial.number}: {state}{at} ({params})")


def start_trials(result, ds, base, space, n_trials: int, sampler: str, pruner: str) -> TrialCounter:
    """Print the search's header (:func:`search_header`) and start its trial counter."""
    Counter.write(search_header(result, ds, base, space, n_trials=n_trials, sampler=sampler, pruner=pruner))
    return TrialCounter(n_trials, result.direction)


def search_header(result, ds, base, space, *, n_trials: int, sampler: str, pruner: str) -> str:
    """What a search will run, on what and under which protocol: the lines printed before its first trial."""
    done = len(result.study.trials)
    return "\n".join([
        f"hyper-parameter search: {n_trials} trial{'s' * (n_trials != 1)} of {base.resolve().model.name} on {ds.name} "
        f"({ds.num_entities:,} entities, {ds.num_relations:,} relations, {len(ds.training):,} training triples), "
        f"sampler {sampler}, pruner {pruner}",
        f"study {result.study_name!r} in {result.shown_storage}" + (f" (resumed: {done} trials before)" if done else ""),
        f"each trial: train, then {result.metric} on the validation split ({len(ds.validation):,} triples, filtered "
        f"with training + validation), to {result.direction}; the test split is never read",
        "searching " + ", ".join(space) if space else "searching nothing (every trial is the base configuration)",
    ])
