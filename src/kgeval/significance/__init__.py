"""Conclusions drawn from rank tables: better than chance, how sure, better than another model.

- :mod:`.pvalues`: one-sided p-values of a metric value against the null model (ranks
  independent, uniform on 1..Cᵢ), exact where tractable, else the normal approximation;
- :mod:`.units`: the resampling unit (one evaluation triple, its head and tail tasks
  together) and per-unit sufficient statistics of the power-mean metrics;
- :mod:`.bootstrap`: confidence intervals of any metric (``scipy.stats.bootstrap``);
- :mod:`.compare`: paired comparison of models on the same tasks (permutation, bootstrap,
  Wilcoxon) with multiple-testing corrections.

Three layers share this package (``tests/test_layering.py``): the statistics on rank tables and
metric values (``pvalues``, ``units``, ``bootstrap``, ``corrections``, ``paired``) sit below
:mod:`kgeval.results` and never import it; the null model of a dataset (``candidates``,
``null_model``, ``null_tables``) reads datasets and the filter index; the comparisons of models
(``compare``, ``align``, ``adjust``) take loaded Results and read no run directory
(:mod:`kgeval.workflow.comparison` does). This ``__init__`` imports nothing, so importing one
layer's module loads none of the others.
"""
