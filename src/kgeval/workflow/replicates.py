"""The same configuration trained with several seeds: :func:`kgeval.replicates` (``kgeval.workflow.pipeline``).

Replicate ``i`` (0-based) uses seed ``seed + i`` (the configuration's seed, default 42), so a
replicate set is reproducible and its first run is the single run of the same configuration.
Saved as a directory holding one run directory per replicate (``seed<seed>``, see
:mod:`.runs`) and :data:`REPLICATES_FILE`, the summary across seeds: for every headline
metric and side, the mean, the sample standard deviation (ddof = 1) and the t-based interval

    mean ± t_{(1+confidence)/2, k−1} · sd / √k   (clipped to the metric's range)

over the k per-run values (the seeds are the sampled units: it describes the variation due
to training, not to the finite test set). :func:`kgeval.compare` on two replicate
directories adds run-level tests on these per-run values.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._json import read_json, write_json
from .._validation import SEED_LIMIT, check_int
from .. import metrics as _metrics
from ..errors import InvalidInputError, KGEvalError

REPLICATES_FILE = "replicates.json"
#: the summarised metrics (realistic ranks): (label, metric key)
SUMMARY_METRICS = (("MRR", "inverse_harmonic_mean_rank"), ("Hits@1", "hits_at_1"), ("Hits@3", "hits_at_3"),
                   ("Hits@10", "hits_at_10"), ("MR", "arithmetic_mean_rank"), ("GMR", "geometric_mean_rank"),
                   ("AMRI", "adjusted_arithmetic_mean_rank_index"),
                   ("adjusted MRR", "adjusted_inverse_harmonic_mean_rank"))


def replicate_seeds(seed: int, num_replicates: int) -> list[int]:
    """``seed, seed + 1, ..., seed + k - 1``, all valid seeds (below 2**32)."""
    k = check_int("num_replicates", num_replicates, minimum=2)
    if seed + k > SEED_LIMIT:
        raise InvalidInputError(f"num_replicates={k} from seed {seed} runs past the largest seed 2**32 - 1")
    return [seed + i for i in range(k)]


def summarise(results: list, confidence: float = 0.95) -> dict[str, dict[str, Any]]:
    """``{"<side>.realistic.<key>": {"mean", "sd", "ci_low", "ci_high", "values"}}`` across runs."""
    from scipy.stats import t

    out = {}
    for side in results[0].sides:
        for _, key in SUMMARY_METRICS:
            name = f"{side}.realistic.{key}"
            try:
                values = np.array([r.get_metric(name) for r in results], dtype=np.float64)
            except KGEvalError:
                continue
            k, mean = values.size, float(values.mean())
            sd = float(values.std(ddof=1))
            half = float(t.ppf((1 + confidence) / 2, k - 1)) * sd / math.sqrt(k)
            # clipped to the metric's range: the symmetric t interval of a few runs left it (hits@1
            # of 3 seeds [-0.12, 0.16], hits@10 up to 1.07)
            vr = _metrics.get(key).value_range
            out[name] = {"mean": mean, "sd": sd, "ci_low": float(max(mean - half, vr.lower)),
                         "ci_high": float(min(mean + half, vr.upper)), "values": values.tolist()}
    return out


@dataclass
class ReplicatesResult:
    """The runs of one configuration over several seeds (:attr:`runs`: :class:`PipelineResult` each)."""

    runs: list
    seeds: list[int]
    confidence: float = 0.95
    summary: dict[str, dict[str, Any]] = field(init=False)

    def __post_init__(self):
        self.summary = summarise([r.results for r in self.runs], self.confidence)

    @property
    def results(self) -> list:
        return [r.results for r in self.runs]

    def summary_table(self) -> str:
        """Mean ± sd and the CI across seeds, one line per metric (both sides pooled)."""
        from ..results.render import format_value

        pct = f"{100 * self.confidence:g}%"
        lines = [f"{len(self.seeds)} replicates (seeds {self.seeds[0]}..{self.seeds[-1]}); "
                 f"mean ± sd and the t-based {pct} interval across seeds (realistic ranks, both sides)",
                 f"{'metric':<52}{'mean':>12}{'sd':>12}   {pct} CI"]
        for label, key in SUMMARY_METRICS:
            s = self.summary.get(f"both.realistic.{key}")
            if s is not None:
                mean, sd = format_value(s["mean"]), format_value(s["sd"])
                lines.append(f"{label + ' (' + key + ')':<52}{mean:>12}{sd:>12}   "
                             f"[{format_value(s['ci_low'])}, {format_value(s['ci_high'])}]")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"format": "kgeval-replicates", "version": 1, "seeds": self.seeds,
                "runs": [f"seed{s}" for s in self.seeds], "confidence": self.confidence, "summary": self.summary}

    def save(self, directory, *, overwrite: bool = False) -> Path:
        """Each run into ``directory/seed<seed>`` and the summary into ``directory/replicates.json``, all
        at once: the set is written beside ``directory`` and moved into place when complete (a failure
        used to leave ``seed42/`` without ``seed43/`` or ``replicates.json``). To keep each run as soon
        as it is trained, give ``output`` to :func:`kgeval.replicates` instead."""
        from .runs import _commit, check_output, staging_directory

        target = check_output(directory, overwrite=overwrite)
        existed = target.exists()
        target.parent.mkdir(parents=True, exist_ok=True)
        with staging_directory(target) as tmp:
            for seed, run in zip(self.seeds, self.runs):
                run.save(tmp / f"seed{seed}")
            write_summary(self, tmp, target)
            return _commit(tmp, target, existed=existed, overwrite=overwrite)


def write_summary(result: ReplicatesResult, directory: Path, target: Path) -> None:
    from .runs import save_failure

    try:
        write_json(directory / REPLICATES_FILE, result.to_json())
    except OSError as exc:
        raise save_failure(target / REPLICATES_FILE, exc, "the replicate summary") from exc


class ReplicateSaveError(KGEvalError):
    """A replicate could not be saved by :func:`kgeval.replicates` (``output=``); the replicates before
    it are saved.

    ``runs``: the runs trained so far (the last one is the one not saved), ``seeds``: their seeds.
    """

    def __init__(self, message: str, runs: list, seeds: list[int]):
        super().__init__(message)
        self.runs, self.seeds = runs, seeds


def lost_replicate(exc: Exception, target: Path, seeds: list[int], trained: int) -> str:
    """One line: why replicate ``trained - 1`` was not saved, which are saved and which were not run."""
    from .._json import os_cause

    seed = seeds[trained - 1]
    why = str(exc) if isinstance(exc, KGEvalError) else f"cannot save {target / f'seed{seed}'}: {os_cause(exc)}"
    done, rest = seeds[:trained - 1], seeds[trained:]
    kept = ("no replicate was saved" if not done else f"seed {done[0]} is saved in {target}" if len(done) == 1
            else f"seeds {', '.join(map(str, done))} are saved in {target}")
    not_run = ("" if not rest else f"; seed {rest[0]} was not run" if len(rest) == 1
               else f"; seeds {rest[0]}..{rest[-1]} were not run")
    return f"{why}; {kept}{not_run}"


def load_replicates(directory: str | os.PathLike) -> list[Path]:
    """The run directories of a saved replicate set (each then read by :func:`.runs.load_run`)."""
    directory = Path(directory)
    data = read_json(directory / REPLICATES_FILE, "a kgeval replicate summary", root=directory)
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list) or not runs or not all(isinstance(r, str) and r for r in runs):
        raise InvalidInputError(f"{directory / REPLICATES_FILE}: not a kgeval replicate summary (no list of runs)")
    paths = [directory / r for r in runs]
    for r, p in zip(runs, paths):  # an absolute name or '..' read another directory as this set's run
        real, base = os.path.realpath(p), os.path.realpath(directory)
        if os.path.commonpath([real, base]) != base or real == base:
            raise InvalidInputError(f"{directory / REPLICATES_FILE}: lists the run {r!r}, which is not a "
                                    f"directory inside {directory}")
    resolved = [p.resolve() for p in paths]
    twice = [r for r, p in zip(runs, resolved) if resolved.count(p) > 1]
    if twice:  # one run counted twice would be two seeds' worth of evidence
        raise InvalidInputError(f"{directory / REPLICATES_FILE}: lists the run {twice[0]!r} more than once")
    return paths
