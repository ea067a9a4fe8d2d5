"""State shared by the ranking routines of one evaluation (typed, not a parameter bag)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .counting import ConsistencyCheck, Counter
from .options import EvaluationOptions


@dataclass
class RunContext:
    """What every batch of one evaluation needs besides its own tasks."""

    options: EvaluationOptions
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
    #: query rows re-ranked because a scored pass-1 true score differed from the in-batch one (see full.py; not
    #: counted after a missed prediction); the protocol's ``chunk_redone_queries``
    chunk_redone_queries: int = 0
    #: ``[predict_true]`` (see the property), one list shared by the side contexts of sides ranked at once
    prediction: list = field(default_factory=lambda: [True])
    #: sampled ranking scored through ``score_*_candidates`` (the last side's)
    used_candidates_method: bool = False
    #: this rank's share of a distributed evaluation (:class:`.distributed.Plan`); None = one process
    dist: object | None = None
    #: ``distributed="entities"``: ``(lo, hi, row width, row dtype)`` of this rank's entity shard
    shard: tuple | None = None
    #: both sides ranked at once (:mod:`.side_threads`): their open walks, which a finished side helps
    share: object | None = None
    #: the compiled kernels (:mod:`.count_kernel`) were loaded when the evaluation started: every plan (batch
    #: sizes, chunking, walker counts for them) follows this, never a background load finishing between two sides
    kernel: bool = False

    @property
    def predict_true(self) -> bool:
        """Pass 1 predicts true scores from the product's rounding (:mod:`.predicted`); turned off for the
        rest of the evaluation (both sides) after a batch of misses."""
        return self.prediction[0]

    @predict_true.setter
    def predict_true(self, value: bool) -> None:
        self.prediction[0] = bool(value)

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
