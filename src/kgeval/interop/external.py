"""Models trained elsewhere, loaded from plain embedding files and LibKGE checkpoints.

Both become kgeval models with the dataset's ids (:func:`kgeval.models.from_embeddings`,
:func:`kgeval.interop.libkge.load_libkge`). Evaluating them and saving a kgeval run directory is
:func:`kgeval.workflow.foreign.evaluate_external`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import InvalidInputError


@dataclass(frozen=True)
class ExternalSource:
    """Where a model trained elsewhere comes from: plain embedding files (``entity_embeddings``,
    ``relation_embeddings``, ``interaction``, optional ``entity_ids`` / ``relation_ids`` files) or a
    LibKGE checkpoint (``libkge_checkpoint``, ``libkge_data``); the arguments of :func:`load_external`."""

    entity_embeddings: object = None
    relation_embeddings: object = None
    interaction: str | None = None
    libkge_checkpoint: object = None
    libkge_data: object = None
    entity_ids: object = None
    relation_ids: object = None

    def load(self, dataset, *, data_dir=None, shard: tuple[int, int] | None = None):
        """``(model, dataset, description)``: :func:`load_external` of this source."""
        return load_external(self.entity_embeddings, self.relation_embeddings, self.interaction,
                             self.libkge_checkpoint, self.libkge_data, dataset, data_dir=data_dir, shard=shard,
                             entity_ids=self.entity_ids, relation_ids=self.relation_ids)


def load_external(entity_embeddings, relation_embeddings, interaction, libkge_checkpoint, libkge_data, dataset,
                  *, data_dir=None, shard: tuple[int, int] | None = None, entity_ids=None, relation_ids=None):
    """``(model, dataset, description)`` of one external source (embedding files or a LibKGE checkpoint).

    ``entity_ids`` / ``relation_ids``: id files naming the label of each table row
    (:mod:`kgeval.interop.id_files`); the rows are put in the dataset's id order. Without one, the rows
    must already be in that order (the dataset's sorted labels); a row count other than the dataset's
    is refused either way.

    ``shard=(rank, world)``: this rank's entity shard of plain embeddings
    (:func:`kgeval.models.shard_embeddings`, for ``distributed="entities"``): a ``.npy`` entity file is
    memory-mapped and only the local rows ``[n * rank // world, n * (rank + 1) // world)`` are read;
    ``.npz`` / ``.pt`` files cannot be mapped and are read whole, then sliced. A LibKGE checkpoint is
    one pickle holding the whole entity table, so it is not sharded (a named error).
    """
    from ..data import get_dataset
    from ..models.embeddings import from_embeddings
    from ..models.embeddings import shard_embeddings

    if dataset is None:
        raise InvalidInputError("--dataset is required with --entity-embeddings or --libkge-checkpoint")
    ds = get_dataset(dataset, data_dir=data_dir)
    if libkge_checkpoint is not None:
        if shard is not None:
            raise InvalidInputError(ENTITIES_REFUSED["--libkge-checkpoint"])
        from .libkge import load_libkge

        return load_libkge(libkge_checkpoint, ds, data_dir=libkge_data), ds, f"LibKGE model {libkge_checkpoint}"
    if not entity_embeddings or not relation_embeddings or not interaction:
        raise InvalidInputError("plain embeddings need --entity-embeddings, --relation-embeddings and --interaction")
    interaction, extra = cli_interaction(interaction)
    ent = cli_array(entity_embeddings, "--entity-embeddings", "entity embeddings")
    rel = cli_array(relation_embeddings, "--relation-embeddings", "relation embeddings")
    ent_rows = rel_rows = None
    if entity_ids is not None and len(ent.shape) == 2:  # other shapes: from_embeddings names them
        ent_rows = _id_rows(entity_ids, "--entity-ids", "--entity-embeddings", "entity", ent.shape[0], ds)
    num_rel = ds.num_relations
    if relation_ids is not None and len(rel.shape) == 2:
        rel_rows, num_rel = _relation_rows(relation_ids, rel.shape[0], ds)
        rel = _take(rel, rel_rows)
    inverse = rel.shape[0] == 2 * num_rel if len(rel.shape) == 2 else False
    if shard is not None:  # this rank's entities only: the rows of its ids (of a mapped file, only those are read)
        model = shard_embeddings(interaction, ent, rel, rank=shard[0], world=shard[1], num_entities=ds.num_entities,
                                 inverse_relations=inverse, num_relations=ds.num_relations, rows=ent_rows, **extra)
    else:
        model = from_embeddings(interaction, _take(ent, ent_rows), rel, inverse_relations=inverse,
                                num_entities=ds.num_entities, num_relations=ds.num_relations, **extra)
    return model, ds, f"{model.name} embeddings {entity_embeddings}"


def _id_rows(path, flag: str, table_flag: str, kind: str, table_rows: int, ds):
    """The table row of each of ``ds``'s ``kind`` ids, from an id file; ``None`` when that is row ``i`` for
    id ``i`` (the table is then used as it is: a memory-mapped ``.npy`` stays mapped)."""
    import numpy as np

    from .id_files import dataset_rows, read_row_labels

    labels = ds.entity_labels if kind == "entity" else ds.relation_labels
    rows = dataset_rows(read_row_labels(path, flag), list(labels), table_rows, flag=flag, table_flag=table_flag,
                        kind=kind, path=path, dataset=ds.name)
    return None if np.array_equal(rows, np.arange(len(rows))) else rows


def _relation_rows(path, table_rows: int, ds):
    """``(rows, R)``: the relation table's rows in the dataset's order (R rows, or 2R with inverse relations,
    row ``r + R`` the inverse of ``r`` in the file's numbering and in the result's), from ``--relation-ids``."""
    import numpy as np

    from .id_files import read_row_labels

    labels = read_row_labels(path, "--relation-ids")
    n = len(labels)
    if table_rows not in (n, 2 * n):
        raise InvalidInputError(f"--relation-ids {path} lists {n} relation labels but --relation-embeddings has "
                                f"{table_rows} rows (expected {n}, or {2 * n} with inverse relations): the id file "
                                "must name every relation of the table, once")
    from .id_files import dataset_rows

    rows = dataset_rows(labels, list(ds.relation_labels), n, flag="--relation-ids", table_flag="--relation-embeddings",
                        kind="relation", path=path, dataset=ds.name)
    if table_rows == 2 * n:
        rows = np.concatenate([rows, rows + n])
    return (None if np.array_equal(rows, np.arange(len(rows))) else rows), n


def _take(table, rows):
    """``table``'s rows ``rows`` in that order (a copy), or ``table`` itself for ``rows=None``."""
    if rows is None:
        return table
    import torch

    return table[torch.from_numpy(rows)] if isinstance(table, torch.Tensor) else table[rows]


#: the files ``FILE:NAME`` picks an array of (an ``.npz`` member, a tensor of a ``.pt`` dict)
NAMED_ARRAY_SUFFIXES = (".npz", ".pt", ".pth")


def array_spec(value, flag: str) -> tuple[str, str | None]:
    """``(path, array name or None)`` of an embedding option: ``FILE`` or ``FILE:NAME``.

    An existing file of that exact name is the file (a name may hold a ``:``); else the text after the
    ``:`` ending the longest existing file name names the array of an ``.npz`` (or a tensor of a ``.pt``
    dict; the name may hold a ``:`` too). A missing file, a directory, an empty name and a name given for
    a ``.npy`` file (one array) are named errors.
    """
    value = os.fspath(value)
    if os.path.isfile(value):
        return value, None
    # the longest FILE before a ':' that is a file: an array name may hold ':' too (a .pt dict's 'enc:ent')
    colons = [i for i, c in enumerate(value) if c == ":"]
    cut = next((i for i in reversed(colons) if i and os.path.isfile(value[:i])), None)
    if cut is not None:
        path, key = value[:cut], value[cut + 1:]
        if os.path.splitext(path)[1].lower() not in NAMED_ARRAY_SUFFIXES:
            raise InvalidInputError(f"{flag} {value}: {path} is not an .npz or .pt file; FILE:NAME names an array "
                                    "of an .npz file (or a tensor of a .pt dict), a .npy file holds one array")
        if not key:
            raise InvalidInputError(f"{flag} {value}: the array name after ':' is empty")
        return path, key
    if os.path.isdir(value):
        raise InvalidInputError(f"{flag} {value}: a directory, not an embedding file")
    raise InvalidInputError(f"{flag} {value}: no such file")


def cli_array(value, flag: str, what: str):
    """The matrix of an embedding option (``FILE`` or ``FILE:NAME``, :func:`array_spec`); an ``.npz`` / ``.pt``
    file holding several arrays and no name, or a name it does not hold, is refused listing its arrays."""
    from ..models.embeddings import ArrayChoiceError, load_array

    path, key = array_spec(value, flag)
    try:
        return load_array(path, key=key, name=what)
    except ArrayChoiceError as exc:
        if exc.key is not None:
            raise InvalidInputError(f"{flag} {value}: {path} has no array {exc.key!r}; it holds {exc.names}") from None
        if not exc.names:
            raise InvalidInputError(f"{flag} {value}: {path} holds no array") from None
        raise InvalidInputError(f"{flag} {value} holds {len(exc.names)} arrays {exc.names}: name the one to use "
                                f"as {path}:NAME, e.g. {path}:{exc.names[0]}") from None


def cli_interaction(name: str) -> tuple[str, dict]:
    """``(interaction, keywords of from_embeddings)`` of ``--interaction``: TransE's distance norm must be named
    (``transe-l1`` / ``transe-l2``). A bare ``transe`` scored every file with the L2 distance (from_embeddings'
    default), while PyKEEN's and LibKGE's TransE default to L1: other ranks, silently."""
    key = str(name).strip().lower()
    if key in ("transe-l1", "transe-l2"):
        return "transe", {"p": int(key[-1])}
    if key == "transe":
        raise InvalidInputError("--interaction transe: name the distance the embeddings were trained with, "
                                "transe-l1 (PyKEEN's and LibKGE's default) or transe-l2")
    return name, {}


OUTPUT_REFUSED = ("--output with --distributed entities and embedding files would write a run directory whose "
                  "model.pt holds the whole entity table, which no rank has: evaluate with --distributed tasks "
                  "to write one, or without --output")

#: why ``distributed="entities"`` refuses a source (``kgeval evaluate --distributed tasks`` takes them all)
ENTITIES_REFUSED = {
    "--libkge-checkpoint": "--distributed entities cannot shard a LibKGE checkpoint: it is one torch pickle, so "
                           "every rank would read the whole entity table. Use --distributed tasks (a full model "
                           "per rank), or save the entity and relation embeddings as .npy files and pass "
                           "--entity-embeddings/--relation-embeddings (memory-mapped: each rank reads its rows).",
    "--pykeen-dir": "--distributed entities cannot shard a PyKEEN model: trained_model.pkl is one pickle holding "
                    "the whole entity table, and PyKEEN's interactions are scored by PyKEEN, not by kgeval's "
                    "shardable models. Use --distributed tasks (a full model per rank), or evaluate its "
                    "kgeval conversion (--pykeen-dir ... --output RUN, then --model-file RUN --distributed "
                    "entities).",
}
