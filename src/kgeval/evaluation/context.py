"""State shared by the ranking routines of one evaluation (typed, not a parameter bag)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .counting import ConsistencyCheck, Counter
from .options import EvaluationOptions, Tuning


@dataclass
class RunContext:
    """What every batch of one evaluation needs besides its own tasks."""

    options: EvaluationOptions
    #: the internal performance knobs of this evaluation (read once, at its start)
    tuning: Tuning
    device: torch.device
    num_entities: int
    num_relations: int
    #: candidate columns per score row: allowed entities (restriction) or all entities
    num_columns: int
    #: the allowed entity ids, sorted (None = all entities)
    allowed: torch.Tensor | None
    #: entity id -> column position under a restriction (-1 = not allowed); None = identity
    pos_map: torch.Tensor | None
    #: bytes for score matrices and temporaries
    budget: int
    counter: Counter
    consistency: ConsistencyCheck | None
    #: query-level metrics requested (full ranking only; needs whole score rows)
    want_query_metrics: bool
    #: torch's thread count for the scorer calls (the caller's)
    score_threads: int | None = None
    #: the widest entity chunk used (None = whole rows)
    chunk_used: int | None = None
    #: query rows re-ranked because a scored pass-1 true score differed from the in-batch one (see full.py);
    #: the protocol's ``chunk_redone_queries``
    chunk_redone_queries: int = 0
    #: sampled ranking scored through ``score_*_candidates`` (the last side's)
    used_candidates_method: bool = False
    #: this rank's share of a distributed evaluation (:class:`.distributed.Plan`); None = one process
    dist: object | None = None
    #: ``distributed="entities"``: ``(lo, hi, row width, row dtype)`` of this rank's entity shard
    shard: tuple | None = None

    def note_chunk(self, width: int) -> None:
        self.chunk_used = width if self.chunk_used is None else max(self.chunk_used, width)


@dataclass
class SideResult:
    """Per-task counts of one side, collected batch by batch."""

    triple_index: list = field(default_factory=list)
    better: list = field(default_factory=list)
    tied: list = field(default_factory=list)
    ncand: list = field(default_factory=list)

    def add(self, triple_index: np.ndarray, better, tied, ncand) -> None:
        self.triple_index.append(triple_index)
        self.better.append(better.cpu().numpy())
        self.tied.append(tied.cpu().numpy())
        self.ncand.append(ncand.cpu().numpy())
