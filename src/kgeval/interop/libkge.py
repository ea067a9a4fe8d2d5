"""LibKGE checkpoints (``checkpoint_best.pt``, uma-pi1/kge) as kgeval models, without running pickled code.

A LibKGE training checkpoint is a ``torch.save`` dict holding ``"config"`` (a pickled
``kge.config.Config`` whose ``options`` is the nested YAML config) and ``"model"`` =
``(state_dict, meta)`` from ``KgeModel.save``. The embeddings are
``_entity_embedder._embeddings.weight`` / ``_relation_embedder._embeddings.weight`` (older
files: ``.embeddings.weight``), prefixed ``_base_model.`` for ``reciprocal_relations_model``,
whose relation rows ``r + R`` are the reciprocal relations used to score heads
(``score_po(p, o) = score_sp(o, p + R)``).

The file is read with ``torch.load(weights_only=True)``; every class the pickle names that
torch does not allow (``kge.config.Config``, scheduler or trace objects) is replaced by an
inert placeholder that only stores its state, so no code from the file runs.

Scoring (LibKGE's scorers, ``d`` = entity width, complex rows ``[re | im]``):
TransE ``-||s + p - o||_l`` (``transe.l_norm``, default 1), DistMult ``<s, p, o>``, ComplEx
``Re<s, p, conj(o)>``, RotatE ``-||s o exp(i p) - o||`` with the complex moduli combined by
``rotate.l_norm`` (default 1; kgeval's RotatE holds the 2-norm only, so ``l_norm`` must be 2).
Rows are mapped to a kgeval dataset through ``entity_ids.del`` / ``relation_ids.del``
(``index<TAB>id`` per line) of the checkpoint's LibKGE dataset folder; a packaged model
(``kge package``: ``checkpoint["dataset"]["meta"]``) holds its own ids, which are used, and an
id file that numbers them differently is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .._textio import text_lines
from ..errors import InvalidInputError, plural

SUPPORTED = ("complex", "distmult", "rotate", "transe")
_DEFAULT_L_NORM = {"transe": 1.0, "rotate": 1.0}


@dataclass
class LibKGECheckpoint:
    """What a checkpoint holds: ``family`` (base model), ``reciprocal``, the raw embedding
    matrices (LibKGE row order) and the interaction options (``l_norm``)."""

    family: str
    reciprocal: bool
    entity: torch.Tensor
    relation: torch.Tensor
    l_norm: float | None
    options: dict
    #: the ids in row order stored by ``kge package`` (``checkpoint["dataset"]["meta"]``), else None
    entity_ids: list[str] | None = None
    relation_ids: list[str] | None = None


def read_checkpoint(path) -> LibKGECheckpoint:
    """Parse a LibKGE checkpoint (see the module docstring); unsupported families raise a named error."""
    blob = _load(path)
    if not isinstance(blob, dict) or "model" not in blob or "config" not in blob:
        raise InvalidInputError(f"{path!r} is not a LibKGE checkpoint (expected a dict with 'config' and 'model')")
    options = getattr(blob["config"], "options", blob["config"])
    if not isinstance(options, dict) or not isinstance(options.get("model"), str):
        raise InvalidInputError(f"{path!r}: the LibKGE config names no model (config.options['model'])")
    family, reciprocal, base_key = options["model"].lower(), False, options["model"]
    if family == "reciprocal_relations_model":
        base = (options.get("reciprocal_relations_model") or {}).get("base_model") or {}
        family, reciprocal, base_key = str(base.get("type", "")).lower(), True, None
    if family not in SUPPORTED:
        raise InvalidInputError(f"{path!r}: LibKGE model {family!r} is not supported; supported: "
                                f"{', '.join(SUPPORTED)} (each also as reciprocal_relations_model's base_model)")
    section = options.get(base_key, {}) if base_key else options["reciprocal_relations_model"]["base_model"]
    l_norm = None
    if family in _DEFAULT_L_NORM:
        l_norm = float(section.get("l_norm", options.get(family, {}).get("l_norm", _DEFAULT_L_NORM[family])))
    model = blob["model"]
    state = model[0] if isinstance(model, (tuple, list)) and model else model
    if not isinstance(state, dict):
        raise InvalidInputError(f"{path!r}: checkpoint['model'] holds no state dict")
    prefix = "_base_model." if reciprocal else ""
    ent = _weight(path, state, prefix + "_entity_embedder")
    rel = _weight(path, state, prefix + "_relation_embedder")
    meta = blob.get("dataset") if isinstance(blob.get("dataset"), dict) else {}
    meta = meta.get("meta") if isinstance(meta.get("meta"), dict) else {}
    ids = {kind: _packaged_ids(path, meta.get(f"{kind}_ids"), kind) for kind in ("entity", "relation")}
    return LibKGECheckpoint(family, reciprocal, ent, rel, l_norm, options, ids["entity"], ids["relation"])


def _packaged_ids(path, values, kind: str) -> list[str] | None:
    """The ``{kind}_ids`` list of a packaged model (``kge package``), or None when it holds none."""
    if values is None:
        return None
    if not isinstance(values, (list, tuple)) or not all(isinstance(x, str) for x in values):
        raise InvalidInputError(f"{path!r}: checkpoint['dataset']['meta']['{kind}_ids'] is not a list of ids")
    return list(values)


def load_libkge(path, dataset, *, data_dir=None):
    """The checkpoint as a kgeval model whose ids are ``dataset``'s (rows reordered by label).

    ``data_dir``: the LibKGE dataset folder with ``entity_ids.del`` / ``relation_ids.del``
    (default: the checkpoint's folder). A label of ``dataset`` missing from the checkpoint, or
    different entity / relation counts, raise :class:`~kgeval.errors.InvalidInputError`.
    """
    from ..models import from_embeddings

    ckpt = read_checkpoint(path)
    folder = Path(data_dir) if data_dir is not None else Path(os.fspath(path)).parent
    if ckpt.reciprocal and ckpt.relation.shape[0] % 2:
        # rows r and r + R: an odd count is no reciprocal table (the last row was dropped, silently)
        raise InvalidInputError(f"{path!r}: a reciprocal_relations_model needs an even number of relation rows "
                                f"(r and its reciprocal r + R), got {ckpt.relation.shape[0]}")
    num_rel = ckpt.relation.shape[0] // 2 if ckpt.reciprocal else ckpt.relation.shape[0]
    ent_ids = _ids_of(ckpt.entity_ids, folder / "entity_ids.del", ckpt.entity.shape[0], "entity", data_dir)
    rel_ids = _ids_of(ckpt.relation_ids, folder / "relation_ids.del", num_rel, "relation", data_dir)
    ent_rows = _rows(ent_ids, dataset.entity_labels, "entity")
    rel_rows = _rows(rel_ids, dataset.relation_labels, "relation")
    if ckpt.reciprocal:
        rel_rows = rel_rows + [r + num_rel for r in rel_rows]
    p = 2
    if ckpt.family == "transe":
        if ckpt.l_norm not in (1.0, 2.0):
            raise InvalidInputError(f"{path!r}: TransE l_norm={ckpt.l_norm} is not supported (1 or 2)")
        p = int(ckpt.l_norm)
    if ckpt.family == "rotate" and ckpt.l_norm != 2.0:
        raise InvalidInputError(f"{path!r}: RotatE with l_norm={ckpt.l_norm} is not supported; kgeval's RotatE "
                                "uses the 2-norm (rotate.l_norm: 2)")
    return from_embeddings(ckpt.family, ckpt.entity[ent_rows], ckpt.relation[rel_rows],
                           inverse_relations=ckpt.reciprocal, p=p)


def _ids_of(packaged: list[str] | None, path: Path, expected: int, kind: str, data_dir) -> list[str]:
    """The row order of the ``kind`` embeddings: a packaged model's own ids (checked against
    ``{kind}_ids.del`` when that file is there), else the file's."""
    if packaged is None:
        return read_ids(path, expected, kind)
    if len(packaged) != expected:
        raise InvalidInputError(f"the packaged model lists {len(packaged)} {kind} ids but has {expected} "
                                f"{kind} embeddings")
    if data_dir is not None or path.is_file():
        stored = read_ids(path, expected, kind)
        if stored != packaged:
            i = next(i for i, (a, b) in enumerate(zip(stored, packaged)) if a != b)
            raise InvalidInputError(f"{str(path)!r} numbers the {'entities' if kind == 'entity' else 'relations'} differently from the packaged model's own "
                                    f"{kind} ids (index {i}: {stored[i]!r} in the file, {packaged[i]!r} in the "
                                    "model): the rows would be mapped to the wrong labels")
    return packaged


def read_ids(path: Path, expected: int, kind: str) -> list[str]:
    """The ids of ``entity_ids.del`` / ``relation_ids.del`` in index order (``index<TAB>id`` lines, parsed as
    kgeval's id files are: :func:`.id_files.row_label_lines`), indices ``0 .. expected-1`` each once, each id once."""
    from .id_files import numbering_gaps, row_label_lines, unique_labels

    if not path.is_file():
        raise InvalidInputError(f"LibKGE {kind} id file {str(path)!r} does not exist (pass the dataset folder)")
    where = repr(str(path))
    # decoded like kgeval's triple files: a non-UTF-8 file is a named error (not a UnicodeDecodeError),
    # a byte-order mark is dropped (it would otherwise join the first index), any line ending is accepted
    ids = row_label_lines(enumerate(text_lines(path.read_bytes(), str(path)), 1), where, form="index<TAB>id")
    gaps = numbering_gaps(ids, expected, "index(es)")
    if gaps:
        raise InvalidInputError(f"{where} holds {len(ids)} {kind} ids but the checkpoint has {expected} {kind} "
                                f"embeddings (indices must be 0..{expected - 1}, each once: {gaps})")
    unique_labels(ids, where)
    return [ids[i][1] for i in range(expected)]


def _rows(ids: list[str], labels: list[str], kind: str) -> list[int]:
    if len(ids) != len(labels):
        raise InvalidInputError(f"the checkpoint has {len(ids)} {plural(kind)} but the dataset has {len(labels)}")
    where = {label: i for i, label in enumerate(ids)}
    missing = [x for x in labels if x not in where]
    if missing:
        raise InvalidInputError(f"{len(missing)} {kind} label(s) of the dataset are not in the checkpoint's "
                                f"{kind}_ids.del, e.g. {missing[:3]}")
    return [where[x] for x in labels]


def _weight(path, state: dict, embedder: str) -> torch.Tensor:
    for key in (f"{embedder}._embeddings.weight", f"{embedder}.embeddings.weight"):
        if isinstance(state.get(key), torch.Tensor):
            w = state[key].detach()
            # float64 stays float64 (near-ties 1e-9 apart tie in float32); half precision is widened
            return w if w.dtype == torch.float64 else w.float()
    raise InvalidInputError(f"{path!r}: no {embedder}._embeddings.weight in the model's state dict "
                            f"(keys: {sorted(state)[:8]})")


def _placeholder(qualified: str) -> type:
    """An inert class standing in for ``qualified``: calling it or building it only stores data."""

    def init(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def setstate(self, state):
        if isinstance(state, tuple) and len(state) == 2 and (state[0] is None or isinstance(state[0], dict)):
            state = {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.state = state

    module, _, name = qualified.rpartition(".")
    return type(name, (), {"__init__": init, "__setstate__": setstate, "__module__": module})


def _load(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InvalidInputError(f"LibKGE checkpoint {path!r} does not exist")
    try:
        unknown = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        stand_ins = [(_placeholder(g), g) for g in unknown]
        with torch.serialization.safe_globals(stand_ins):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # zip / unpickling errors, or a global torch blocks (os.system, ...)
        lines = str(exc).splitlines() or [""]
        why = next((x for x in lines if "GLOBAL" in x), lines[0])[:200]
        raise InvalidInputError(f"{path!r} is not a readable LibKGE checkpoint, refused without running "
                                f"its pickled code ({type(exc).__name__}: {why})") from None
