"""``from_pykeen``: a trained PyKEEN model as one of kgeval's own models (same scores).

The embeddings are read through PyKEEN's representation modules (so complex layouts and
normalisers are PyKEEN's own) and copied into the matching kgeval model:

- TransE ``-||h + r - t||_p`` (p in {1, 2}), DistMult ``<h, r, t>``: embeddings as they are;
- ComplEx ``Re(<h, r, conj(t)>)``: complex ``(n, d)`` -> real ``[re | im]`` ``(n, 2d)``;
- RotatE ``-||h o r - t||_2``: entities as ``[re | im]``, relations as phases ``angle(r)``
  (PyKEEN keeps ``|r_i| = 1`` with its ``complex_normalize`` constrainer; other moduli are refused);
- PairRE ``-||h' o r_h - t' o r_t||_p``: entities normalised (PyKEEN's normaliser), ``[r_h | r_t]``;
- TuckER ``BN1(BN0(h) x_1 W x_2 r) . t``: PyKEEN's core ``W[i, j, k]`` (head i, relation j, tail k)
  becomes kgeval's ``core[j, i, k]``; batch norms (running statistics) and dropout rates copied.

Models trained with inverse triples (relation ``r`` at row ``2r``, inverse at ``2r + 1``) become
kgeval models with ``inverse_relations=True`` (``r`` at row ``r``, inverse at ``r + R``), which
answer head queries through the inverse relation exactly like PyKEEN.
"""

from __future__ import annotations

import torch

from ..errors import InvalidInputError
from .pykeen import PyKEENScorer

__all__ = ["from_pykeen", "SUPPORTED_INTERACTIONS"]

#: PyKEEN interaction class -> kgeval model name
SUPPORTED_INTERACTIONS = {
    "TransEInteraction": "transe",
    "DistMultInteraction": "distmult",
    "ComplExInteraction": "complex",
    "RotatEInteraction": "rotate",
    "PairREInteraction": "pairre",
    "TuckERInteraction": "tucker",
}


def from_pykeen(model):
    """A kgeval :class:`~kgeval.models.Model` scoring exactly like the PyKEEN ``model``.

    Supported: PyKEEN's TransE, DistMult, ComplEx, RotatE, PairRE and TuckER (with or without
    inverse triples); anything else raises :class:`~kgeval.errors.InvalidInputError` listing
    them. The result needs no pykeen to be saved (``save``) and loaded again (``load_model``,
    ``weights_only``).
    """
    from ..models import get_model

    scorer = PyKEENScorer(model)  # checks it is a PyKEEN model with the default relation layout
    interaction = type(getattr(model, "interaction", None)).__name__
    name = SUPPORTED_INTERACTIONS.get(interaction)
    if name is None:
        raise InvalidInputError(
            f"from_pykeen cannot convert {type(model).__name__} (interaction {interaction}); supported: "
            + ", ".join(f"{k.removesuffix('Interaction')}" for k in SUPPORTED_INTERACTIONS))
    if getattr(model, "predict_with_sigmoid", False):
        raise InvalidInputError("the PyKEEN model has predict_with_sigmoid=True; kgeval models score without "
                                "the sigmoid: set model.predict_with_sigmoid = False to convert it")
    _check_plain(model, name)
    model.eval()
    with torch.no_grad():
        ent = model.entity_representations[0](indices=None).detach().cpu()
        rels = [rep(indices=None).detach().cpu() for rep in model.relation_representations]
        inner = [t for t in model.interaction.state_dict().values() if t.is_floating_point()]  # TuckER's core, norms
        _check_dtype(model, [ent, *rels, *inner])
        kwargs, ent_w, rel_w, extra = _CONVERT[name](model.interaction, ent, rels)
        if scorer.inverse:  # PyKEEN: r at 2r, r⁻¹ at 2r + 1 -> kgeval: r at r, r⁻¹ at r + R
            rel_w = torch.cat([rel_w[0::2], rel_w[1::2]])
        dim = kwargs.pop("dim")
        out = get_model(name, scorer.num_entities, scorer.num_relations, dim=dim, inverse_relations=scorer.inverse,
                        **kwargs)
        state = out.state_dict()
        state.update({"entity.weight": ent_w, "relation.weight": rel_w, **extra})
        out.load_state_dict(state)
    return out.eval()


def _check_plain(model, name: str) -> None:
    reps = list(getattr(model, "entity_representations", ())) + list(getattr(model, "relation_representations", ()))
    expected = 3 if name == "pairre" else 2
    if len(reps) != expected or any(type(r).__name__ != "Embedding" for r in reps):
        kinds = ", ".join(type(r).__name__ for r in reps)
        raise InvalidInputError(f"from_pykeen converts plain embedding models only; this {type(model).__name__} "
                                f"has representations [{kinds}]")


def _check_dtype(model, tensors) -> None:
    """kgeval's models compute in float32: a PyKEEN model computing in another precision would be
    converted to float32 weights (silently rounded) and scored in float32, so its ranks could differ."""
    other = sorted({str(t.dtype).removeprefix("torch.") for t in tensors} - {"float32", "complex64"})
    if other:
        raise InvalidInputError(
            f"from_pykeen converts float32 PyKEEN models only (kgeval models compute in float32); this "
            f"{type(model).__name__} holds {', '.join(other)} weights, which would be rounded to float32 and rank "
            "differently: evaluate the PyKEEN model itself (kgeval.evaluate(model, ...) scores it through PyKEEN), "
            "or convert model.float() if float32 scores are what you want")


def _norm(interaction, name: str, allowed=(1, 2)) -> int:
    if getattr(interaction, "power_norm", False):
        raise InvalidInputError(f"{name} with power_norm=True has no kgeval counterpart (kgeval uses the plain norm)")
    p = interaction.p
    if p not in allowed:
        raise InvalidInputError(f"{name} with p={p!r} has no kgeval counterpart (supported: p in {list(allowed)})")
    return int(p)


def _complex_parts(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x.real, x.imag], dim=-1)


def _transe(inter, ent, rels):
    return {"dim": ent.shape[1], "p": _norm(inter, "TransE")}, ent, rels[0], {}


def _distmult(inter, ent, rels):
    return {"dim": ent.shape[1]}, ent, rels[0], {}


def _complex(inter, ent, rels):
    return {"dim": ent.shape[1]}, _complex_parts(ent), _complex_parts(rels[0]), {}


def _rotate(inter, ent, rels):
    _norm(inter, "RotatE", allowed=(2,))
    r = rels[0]
    off = float((r.abs() - 1).abs().max()) if r.numel() else 0.0
    if off > 1e-4:
        raise InvalidInputError(f"RotatE relation embeddings must be unit complex numbers (PyKEEN's complex_normalize "
                                f"constrainer); the largest | |r| - 1 | is {off:.3g}")
    return {"dim": ent.shape[1]}, _complex_parts(ent), torch.angle(r), {}


def _pairre(inter, ent, rels):
    return {"dim": ent.shape[1], "p": _norm(inter, "PairRE")}, ent, torch.cat(rels, dim=-1), {}


def _tucker(inter, ent, rels):
    core = inter.core_tensor.detach().cpu()  # (entity dim i, relation dim j, entity dim k)
    bns = (inter.head_batch_norm, inter.head_relation_batch_norm)
    kwargs = {"dim": ent.shape[1], "relation_dim": core.shape[1], "input_dropout": inter.head_dropout.p,
              "hidden_dropout1": inter.relation_dropout.p, "hidden_dropout2": inter.head_relation_dropout.p,
              "batch_norm": bns[0] is not None}
    extra = {"core": core.permute(1, 0, 2).contiguous()}
    if bns[0] is not None:
        for ours, bn in zip(("bn0", "bn1"), bns):
            if bn.eps != 1e-5 or not bn.affine or not bn.track_running_stats:
                raise InvalidInputError("TuckER batch norm with non-default eps/affine/running statistics "
                                        "has no kgeval counterpart")
            for field in ("weight", "bias", "running_mean", "running_var"):
                extra[f"{ours}.{field}"] = getattr(bn, field).detach().cpu()
    return kwargs, ent, rels[0], extra


_CONVERT = {"transe": _transe, "distmult": _distmult, "complex": _complex, "rotate": _rotate, "pairre": _pairre,
            "tucker": _tucker}
