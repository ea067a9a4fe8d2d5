"""Rank-based metrics in the unified framework ``M = g(⊕ f(rᵢ))`` (seed 004).

Use :func:`get` to obtain a metric by key or synonym and :func:`names` to list them.
Every metric is callable on ranks and states its null-model expectation and variance.
"""

from .base import Metric, MonteCarloEstimate, ValueRange
from .derived import AdjustedIndex, DerivedMetric, ExpectationNormalized, ZScore
from .means import (
    ArithmeticMeanRank,
    GeometricMeanRank,
    HarmonicMeanRank,
    HitsAtK,
    InverseArithmeticMeanRank,
    InverseGeometricMeanRank,
    InverseHarmonicMeanRank,
    PowerMeanRank,
)
from .order import Count, InverseMedianRank, MedianAbsoluteDeviation, MedianRank, StandardDeviation, Variance
from .registry import DEFAULT_KS, default_metrics, get, names

__all__ = [
    "Metric", "MonteCarloEstimate", "ValueRange", "DerivedMetric", "AdjustedIndex", "ExpectationNormalized",
    "ZScore", "ArithmeticMeanRank", "GeometricMeanRank", "HarmonicMeanRank", "HitsAtK",
    "InverseArithmeticMeanRank", "InverseGeometricMeanRank", "InverseHarmonicMeanRank", "PowerMeanRank",
    "Count", "InverseMedianRank", "MedianAbsoluteDeviation", "MedianRank", "StandardDeviation", "Variance",
    "DEFAULT_KS", "default_metrics", "get", "names",
]
