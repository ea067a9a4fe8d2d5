"""Groups of ranking tasks for breakdowns, computed from id triples (numpy, memory linear in the triples).

- **relation categories** 1-1 / 1-N / N-1 / N-N (Bordes et al., 2013, "Translating Embeddings for Modeling
  Multi-relational Data"): per relation r, on the counted triples (the training split by default),
  ``tph`` = mean number of distinct tails per distinct (head, r) pair and ``hpt`` = mean number of distinct
  heads per distinct (r, tail) pair; a side is ``1`` when its mean is below the threshold (1.5), else
  ``N``; the head side comes first (1-N: hpt < 1.5 and tph >= 1.5, LibKGE's ``index_relation_types``). A
  relation without a counted triple is ``unseen``;
- **entity frequency**: the degree of the answer entity (``frequency``) or of the query entity
  (``query_frequency``) in the counted triples (the number of triples it occurs in, as head or tail; a
  self-loop once), in quantile buckets of the tasks (LibKGE's ``argument_frequency`` idea; LibKGE
  buckets entities and splits equal frequencies between buckets, here no degree is split);
- **relation groups** named by the user (the rest is ``other``) and **single relations**.

A :class:`Grouping` assigns each row of a rank table to one group; the statistics of a group are the
one machinery's on ``table.subset(grouping.mask(label))`` (:mod:`kgeval.results.breakdown`), so a group's
adjusted index and z-score use that group's own candidate counts.
"""

from __future__ import annotations

from .categories import (CATEGORIES, UNSEEN, RelationCategories, degree_buckets, entity_degrees,
                         relation_categories)
from .groups import GROUPINGS, OTHER, Grouping, GroupingData, group_tasks, grouping_data

__all__ = ["CATEGORIES", "UNSEEN", "OTHER", "GROUPINGS", "RelationCategories", "relation_categories",
           "entity_degrees", "degree_buckets", "Grouping", "GroupingData", "grouping_data", "group_tasks"]
