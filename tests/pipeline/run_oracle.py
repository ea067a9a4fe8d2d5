"""The MRR of a saved run read from its rank_table.npz with numpy only: the oracle of the run-file tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def oracle_mrr(run: Path) -> float:
    """The realistic MRR of both sides from rank_table.npz, without kgeval."""
    with np.load(run / "rank_table.npz") as z:
        return float(np.mean(2.0 / (z["optimistic"] + z["pessimistic"])))
