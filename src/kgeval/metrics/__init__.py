"""Rank-based metrics in the unified framework ``M = g(⊕ f(rᵢ))`` (Hoyt, Berrendorf et al., 2022,
"A Unified Framework for Rank-based Evaluation Metrics for Link Prediction in Knowledge Graphs").

Use :func:`get` to obtain a metric by key or synonym and :func:`names` to list them.
Every metric is callable on ranks and states its null-model expectation and variance
(:meth:`Metric.null_moments`, a :class:`NullMoments`).
"""

from .base import Metric, MonteCarloEstimate, NullMoments, ValueRange
from .derived import AdjustedIndex, DerivedMetric, ExpectationNormalized, ZScore, wrapper_key
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
from .ogb import ogb_metrics
from .order import Count, InverseMedianRank, MedianAbsoluteDeviation, MedianRank, StandardDeviation, Variance
from .registry import DEFAULT_KS, default_metrics, get, names, synonyms_of

__all__ = [
    "Metric", "MonteCarloEstimate", "NullMoments", "ValueRange", "DerivedMetric", "AdjustedIndex",
    "ExpectationNormalized", "ZScore", "wrapper_key", "ArithmeticMeanRank", "GeometricMeanRank", "HarmonicMeanRank", "HitsAtK",
    "InverseArithmeticMeanRank", "InverseGeometricMeanRank", "InverseHarmonicMeanRank", "PowerMeanRank",
    "Count", "InverseMedianRank", "MedianAbsoluteDeviation", "MedianRank", "StandardDeviation", "Variance",
    "DEFAULT_KS", "default_metrics", "get", "names", "synonyms_of", "ogb_metrics",
]
