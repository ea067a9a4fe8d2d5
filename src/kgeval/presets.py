"""Protocol presets: the evaluation defaults of other tools, each with the file and commit it follows.

``kgeval.evaluate(..., protocol="libkge")`` (``--protocol libkge`` on the command line,
``evaluation.options.protocol`` in a pipeline configuration) sets every option that tool uses by
default -- tie rule and tolerance, NaN rule, sides, filtering -- and the short keys of the results
(``mrr``, ``mr``, ``hits@10``) then resolve to that tool's rank type (``results["mrr"]`` is LibKGE's
MRR of its rounded mean rank), while kgeval's own numbers stay under their full keys
(``both.realistic.inverse_harmonic_mean_rank``). Where the evaluation knows the dataset's splits (the
pipeline, ``kgeval evaluate``) a preset also chooses the filter sets of each split and whether triples
with entities unseen in training are dropped.

Why the numbers of two tools differ on one model, and how large each difference is, is the subject of
the guide page "Why your number differs from the paper's" (``docs/guide/why-numbers-differ.md``).
Each :class:`Preset` lists in ``notes`` where kgeval cannot follow its tool (a NaN true score that the
tool ranks first or with rank 0, AmpliGraph's 1/1000 score grid, PyTorch-BigGraph's batch negatives).
The tests in ``tests/interop/test_presets_tools.py`` run PyKEEN 1.11.1, TorchKGE 0.17.7, OGB 1.3.6
and a port of LibKGE's ranking function on the same scores and require identical ranks.

This module holds data only (no evaluation code), so that :class:`kgeval.Results` can resolve a
preset's rank type and the evaluator its options without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .errors import unknown_name

__all__ = ["Preset", "Source", "PRESETS", "DEFAULT", "OPTION_FIELDS", "get", "names", "rank_type_of", "with_preset"]

#: the name of kgeval's own protocol (every option at its default)
DEFAULT = "kgeval"

#: the :class:`~kgeval.evaluation.EvaluationOptions` fields a preset sets
OPTION_FIELDS = ("filtered", "sides", "tie_tolerance", "tie_rtol", "nan_policy")


@dataclass(frozen=True)
class Source:
    """Where a tool's behaviour is written: ``repo`` at ``commit``, ``path`` (``lines``), and what it shows."""

    repo: str
    commit: str
    path: str
    lines: str
    what: str

    def url(self) -> str:
        first = self.lines.split("-")[0].split(",")[0].strip()
        return f"https://github.com/{self.repo}/blob/{self.commit}/{self.path}#L{first}"


@dataclass(frozen=True)
class Preset:
    """The evaluation defaults of one tool (see the module docstring).

    ``filter_splits[split]``: the splits filtered when evaluating ``split`` (``"test"`` or ``"valid"``),
    besides ``split`` itself, which is always filtered (``("train", "test")`` for ``"valid"`` is LibKGE's
    "filtered with test" model selection). ``candidates``: ``"all"`` (every entity), ``"given"`` (the
    dataset's negatives per triple, passed as ``candidates=``: OGB) or ``"sampled"``.
    """

    name: str
    tool: str
    #: the rank type of the tool's headline numbers: what ``results["mrr"]`` resolves to
    rank_type: str
    tie_rule: str
    tie_tolerance: float = 0.0
    tie_rtol: float = 0.0
    nan_policy: str = "worst"
    nan_rule: str = ""
    sides: tuple[str, ...] = ("head", "tail")
    filtered: bool = True
    filter_splits: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: {"test": ("train", "valid"), "valid": ("train",)})
    drop_unseen: bool = False
    unseen_rule: str = "kept, ranked with untrained embeddings"
    candidates: str = "all"
    candidates_rule: str = "every entity but the other known answers"
    sources: tuple[Source, ...] = ()
    #: where kgeval's preset cannot follow the tool (differences it documents, never silent)
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "filter_splits", MappingProxyType(dict(self.filter_splits)))

    def options(self) -> dict:
        """The :class:`~kgeval.evaluation.EvaluationOptions` values of this preset (:data:`OPTION_FIELDS`)."""
        return {name: getattr(self, name) for name in OPTION_FIELDS}

    def filter_sets(self, split: str, *, filter_validation_when_testing: bool = True) -> tuple[str, ...]:
        """The splits filtered (besides ``split`` itself) when evaluating ``split`` (``test``/``valid``);
        ``filter_validation_when_testing=False`` drops ``valid`` from the test filter."""
        sets = self.filter_splits.get(split, ())
        if split == "test" and not filter_validation_when_testing:
            sets = tuple(s for s in sets if s != "valid")
        return sets


def _src(repo, commit, path, lines, what) -> Source:
    return Source(repo, commit, path, lines, what)


_PYKEEN = ("pykeen/pykeen", "8379e338134bd33e53340b47f95c13028a4f9dbf")  # tag v1.11.1
_LIBKGE = ("uma-pi1/kge", "9bca31fefbfc41d48fdc03396acd0cf42eee9dc4")
_TORCHKGE = ("torchkge-team/torchkge", "3adb9344dec974fc29d158025c014b0dcb48118c")  # 0.17.7
_OGB = ("snap-stanford/ogb", "61e9784ca76edeaa6e259ba0f836099608ff0586")  # 1.3.6
_AMPLIGRAPH = ("Accenture/AmpliGraph", "260a732f40cd2178773707963242331808de8e2d")
_DGLKE = ("awslabs/dgl-ke", "e00bccfc4638db8b1f703ecedbf8db81faedb2bb")
_PBG = ("facebookresearch/PyTorch-BigGraph", "6fccd3f572f530469fe97ee63669524c686bcc2a")
_GRAPHVITE = ("DeepGraphLearning/graphvite", "5aad6dcc5e6318396a13d1c6a05f44a833b9c3bc")

_NAN_TRUE_FIRST = ("a NaN true score compares false with everything: the tool ranks it {rank}; kgeval ranks it "
                   "last (nan_policy='worst'). NaN candidates lose in both")

_ALL = (
    Preset(
        "kgeval", "kgeval", "realistic",
        "realistic rank (optimistic + pessimistic) / 2, exact float comparison; every other rank type reported too",
        nan_policy="raise", nan_rule="raise a NaNScoresError naming the triple (nan_policy='worst' ranks it last)",
        candidates_rule="every entity but the other known answers (restrictable)",
    ),
    Preset(
        "pykeen", "PyKEEN 1.11.1", "realistic",
        "realistic rank (optimistic + pessimistic) / 2 from > and >=, exact",
        nan_rule="NaN candidates count neither better nor tied (filtered answers are set to NaN)",
        drop_unseen=True, unseen_rule="dropped, with their entities as candidates (the test split is mapped with "
                                      "the training vocabulary: the model has no other entities)",
        sources=(
            _src(*_PYKEEN, "src/pykeen/evaluation/ranks.py", "53-95", "Ranks.from_scores: > / >= ranks, realistic mean"),
            _src(*_PYKEEN, "src/pykeen/evaluation/evaluator.py", "558-574", "filter_scores_: known answers set to NaN"),
            _src(*_PYKEEN, "src/pykeen/pipeline/api.py", "1208-1231",
                 "filter_validation_when_testing=True: training + validation filtered on test"),
        ),
        notes=(_NAN_TRUE_FIRST.format(rank="optimistic 1, pessimistic 0 (realistic 0.5, a reciprocal rank of 2)"),
               "PyKEEN's number_of_options counts finite scores only; kgeval's num_candidates counts every "
               "candidate: adjusted metrics differ when scores are infinite (MRR, MR and hits@k agree)"),
    ),
    Preset(
        "libkge", "LibKGE (uma-pi1/kge)", "rounded_mean",
        "rounded mean rank #better + floor(#ties / 2) (0-based, #ties counting the true answer), ties by "
        "torch.isclose(rtol=1e-4, atol=1e-5)",
        tie_tolerance=1e-5, tie_rtol=1e-4, nan_policy="minus_inf", nan_rule="NaN scores (true and candidates) read as -inf",
        filter_splits={"test": ("train", "valid"), "valid": ("train", "test")},
        sources=(
            _src(*_LIBKGE, "kge/job/eval_entity_ranking.py", "571-612",
                 "_get_ranks_and_num_ties (NaN -> -inf, isclose ties) and _get_ranks (rank + num_ties // 2)"),
            _src(*_LIBKGE, "kge/config-default.yaml", "449,488,497,516-521",
                 "filter_splits [train, valid], filter_with_test True, valid.metric "
                 "mean_reciprocal_rank_filtered_with_test, rounded_mean_rank, atol 1e-05, rtol 1e-04"),
        ),
        notes=("LibKGE filters by subtracting +inf: a filtered known answer scores -inf and ties with a true score "
               "of -inf (or NaN); kgeval removes it from the candidates, so ranks differ for such tasks only",
               "torch.isclose rounds |score - true| in the scores' dtype; kgeval compares exactly in float64, so a "
               "score within one float32 ulp of the tolerance's edge may fall on the other side",
               "LibKGE reports validation both filtered and filtered with test and selects models on the latter: "
               "the preset's validation filter is train + valid + test"),
    ),
    Preset(
        "torchkge", "TorchKGE 0.17.7", "pessimistic", "pessimistic rank #(score >= true), exact",
        nan_rule="NaN candidates never count (>= is false)",
        filter_splits={"test": ("train", "valid"), "valid": ("train", "test")},
        sources=(
            _src(*_TORCHKGE, "torchkge/utils/operations.py", "37-61", "get_rank: (data >= true_data).sum(dim=1)"),
            _src(*_TORCHKGE, "torchkge/utils/modeling.py", "53-102", "filter_scores: other known answers to -inf"),
            _src(*_TORCHKGE, "torchkge/utils/datasets.py", "107-145",
                 "loaders build one KnowledgeGraph of train + valid + test: its dicts filter every split"),
        ),
        notes=(_NAN_TRUE_FIRST.format(rank="0 (an infinite reciprocal rank)"),
               "known answers are set to -inf, so they tie with a true score of -inf; kgeval removes them"),
    ),
    Preset(
        "ogb", "OGB 1.3.6 (ogbl-wikikg2, ogbl-biokg, ogbl-citation2)", "realistic",
        "realistic rank 0.5 * (#neg > pos + #neg >= pos) + 1 among the given negatives, exact",
        nan_rule="NaN negatives never count", filtered=False,
        candidates="given", candidates_rule="the true answer + the dataset's given negatives (candidates=), unfiltered",
        sources=(_src(*_OGB, "ogb/linkproppred/evaluate.py", "237-278", "Evaluator._eval_mrr (OGB >= 1.3.4)"),),
        notes=(_NAN_TRUE_FIRST.format(rank="first (rank 1)"),),
    ),
    Preset(
        "ampligraph", "AmpliGraph 2", "pessimistic",
        "ranking_strategy='worst': #(corruption score >= true score) on int32(score * 1000)",
        filter_splits={"test": ("train", "valid"), "valid": ("train", "test")},
        sources=(_src(*_AMPLIGRAPH, "ampligraph/latent_features/layers/scoring/AbstractScoringLayer.py", "156-420",
                      "get_ranks: scores * COMPARISION_PRECISION (1e3) cast to int32, worst = <= count"),
                 _src(*_AMPLIGRAPH, "ampligraph/latent_features/models/ScoringBasedEmbeddingModel.py", "1520-1525",
                      "evaluate(corrupt_side='s,o', ranking_strategy='worst')")),
        notes=("AmpliGraph truncates scores to a 1/1000 grid (int32(score * 1000)) before comparing: scores in one "
               "grid cell tie; kgeval compares exactly (tie_tolerance=1e-3 is close but not the same rule)",
               "AmpliGraph takes its filter from the caller; the preset follows its documented example "
               "(train + valid + test); not checked against the tool (TensorFlow)"),
    ),
    Preset(
        "dglke", "DGL-KE", "pessimistic", "pessimistic rank 1 + #(true negative >= positive), exact",
        filter_splits={"test": ("train", "valid"), "valid": ("train", "test")},
        sources=(_src(*_DGLKE, "python/dglke/models/general_models.py", "470-478",
                      "ranking = sum(neg_scores >= pos_score over the unfiltered negatives) + 1"),
                 _src(*_DGLKE, "python/dglke/eval.py", "73-109", "neg_sample_size_eval -1 (all), eval_filter on")),
        notes=("not checked against the tool (it needs DGL)",),
    ),
    Preset(
        "pbg", "PyTorch-BigGraph", "pessimistic", "pessimistic rank #(negative >= positive) + 1, exact",
        filtered=False, candidates="sampled",
        candidates_rule="batch negatives + uniform negatives (eval_num_batch_negs / eval_num_uniform_negs 1000)",
        filter_splits={"test": (), "valid": ()},
        sources=(_src(*_PBG, "torchbiggraph/eval.py", "57-77", "ranks: (neg >= pos).sum(1) + 1, unfiltered"),
                 _src(*_PBG, "torchbiggraph/config.py", "368-390", "eval_num_batch_negs, eval_num_uniform_negs")),
        notes=("PBG ranks against the other edges' entities of its batch and uniform negatives: the preset ranks "
               "unfiltered against every entity (pass num_negatives= for a sampled protocol); its numbers are "
               "comparable in tie rule and filtering only; not checked against the tool",),
    ),
    Preset(
        "graphvite", "GraphVite", "pessimistic", "pessimistic rank #(score >= true) over unmasked candidates, exact",
        filter_splits={"test": ("train", "valid"), "valid": ("train", "test")},
        sources=(_src(*_GRAPHVITE, "python/graphvite/application/application.py", "787-853",
                      "link_prediction: ranking = sum((scores >= truths) * masks); filter_files train/valid/test"),),
        notes=("not checked against the tool (it needs CUDA)",),
    ),
)

#: every preset by name
PRESETS: Mapping[str, Preset] = MappingProxyType({p.name: p for p in _ALL})


def names() -> list[str]:
    """The preset names, kgeval's own first."""
    return list(PRESETS)


def get(name) -> Preset:
    """The :class:`Preset` named ``name`` (any case); an unknown name raises
    :class:`~kgeval.errors.UnknownNameError` with a suggestion.

    Examples
    --------
    >>> from kgeval import presets
    >>> p = presets.get("LibKGE")
    >>> p.rank_type, p.tie_tolerance, p.tie_rtol, p.nan_policy
    ('rounded_mean', 1e-05, 0.0001, 'minus_inf')
    >>> p.filter_sets("valid")
    ('train', 'test')
    """
    if isinstance(name, Preset):
        return name
    key = str(name).strip().lower().replace("-", "").replace("_", "") if isinstance(name, str) else None
    aliases = {"kge": "libkge", "pytorchbiggraph": "pbg", "biggraph": "pbg", "dgl": "dglke"}
    key = aliases.get(key, key)
    if key not in PRESETS:
        raise unknown_name("protocol preset", name, PRESETS)
    return PRESETS[key]


def with_preset(options: Mapping) -> dict:
    """``options`` (evaluation option values by name) with the values of the preset its ``protocol`` names
    filled in where ``options`` does not name them; unchanged without ``protocol``."""
    if "protocol" not in options:
        return dict(options)
    preset = get(options["protocol"])
    return {**preset.options(), **options, "protocol": preset.name}


def rank_type_of(name) -> str:
    """The rank type of preset ``name``'s headline numbers; ``realistic`` for None (kgeval's)."""
    return "realistic" if name is None else get(name).rank_type
