"""The known benchmark datasets: names, published sizes and file hashes.

Sizes and sha256 hashes are those of the canonical releases, whose sources are
TimDettmers/ConvE (FB15k-237 with CR line endings stripped, WN18RR, Nations,
Kinships, UMLS), bi-graph/KGdatasets (WN18) and tsafavi/codex (CoDEx-S, CoDEx-M).

Small datasets ship with the package (``builtin``); the large ones are looked up in a
data directory, see :func:`data_dirs`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

ENV_VAR = "KGEVAL_DATA"
DEFAULT_DATA_DIR = Path("~/.kgeval/datasets")


@dataclass(frozen=True)
class DatasetInfo:
    """Published statistics of one benchmark."""

    name: str  # canonical name, also the directory name inside a data directory
    num_entities: int
    num_relations: int
    num_training: int
    num_validation: int
    num_testing: int
    sha256: dict[str, str]  # canonical split ("training", ...) -> sha256 of train/valid/test.txt
    source: str
    builtin: str | None = None  # package directory under kgeval/data/builtin, if shipped
    aliases: tuple[str, ...] = field(default=())

    @property
    def sizes(self) -> dict[str, int]:
        return {"training": self.num_training, "validation": self.num_validation, "testing": self.num_testing}


def _info(name, counts, hashes, source, builtin=None, aliases=()):
    """``counts``: (entities, relations, training, validation, testing); ``hashes``: the three splits' sha256."""
    return DatasetInfo(
        name, *counts, dict(zip(("training", "validation", "testing"), hashes)), source, builtin, aliases
    )


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in [
        _info(
            "Nations", (14, 55, 1_592, 199, 201),
            ("0830fa9da8e5bba2ccdaa45b7bdc9130451ba66b09ff2708f35fccaf82473e57",
             "2b337a62e51a2f45c283eac98a70d21b7e0e102136be1539b2a52c652a7b0530",
             "3971085165b47b6aeaec68058c6d8d98b3005e929db81268410b95ae4db770ab"),
            "TimDettmers/ConvE, nations.tar.gz", builtin="nations",
        ),
        _info(
            "Kinships", (104, 25, 8_544, 1_068, 1_074),
            ("738612111a6acf0e39662bde24c7e72a4d1edf20931beea077da367dda689731",
             "c56f8630a583178b1e569f11a64aa535ae1ce0b0912d8b1e24716be2b37f04da",
             "05e5733265761d55be9c05bfaff5a8d0808df46f9c1e9d66cc3f2fe114e43d88"),
            "TimDettmers/ConvE, kinship.tar.gz", builtin="kinships", aliases=("kinship",),
        ),
        _info(
            "UMLS", (135, 46, 5_216, 652, 661),
            ("873ef4925516b83e7f6f8cc02b4be51d848828710a7f65a956f0ac4a9e452f35",
             "025c98f8a4891e2a6582ec5b40ee0d904031edad9c52554522f4b7904820c98e",
             "a7eb529a3d2810fcc96341ccc97c625a5e202f8389673aa6bd317eeebbb79014"),
            "TimDettmers/ConvE, umls.tar.gz", builtin="umls",
        ),
        _info(
            "FB15k-237", (14_541, 237, 272_115, 17_535, 20_466),
            ("61099230e4439f90885ca9767739e31e8e32f54736fa1c35952b27997bc7c08a",
             "749cbe9d923bac7b9354da5614ecfed2e0220256d442c3e04a6b303db1f273d9",
             "e2e35e8e6113de220140b6f44dc71a5207b0fc6872d575e874aefe13259b655b"),
            "TimDettmers/ConvE, FB15k-237.tar.gz (CR line endings stripped)",
        ),
        _info(
            "WN18RR", (40_943, 11, 86_835, 3_034, 3_134),
            ("038612e783c215ee5f3ca9fbfca27b8d0739be1028fe4ee7c174aecf0b83d5df",
             "453ce7202afa58094a04d2b1560ee2b02660f1c260b32ce6651c8ccedd1028ab",
             "0383bceaaa1096cf3c03ec021ed0048068e2355dbfc0239b292cefdac821cec5"),
            "TimDettmers/ConvE, WN18RR.tar.gz",
        ),
        _info(
            "WN18", (40_943, 18, 141_442, 5_000, 5_000),
            ("24c9b02dc57d3ae8ca8467ce355995edee7be8eddc3bd070ee34d3c6fc3c95eb",
             "13347bfb5e17d1cae003e0bfe29b4716d3ab748e8cfb6af997138d37da3a51dc",
             "d22c19d176d4ba6a6f0d0c6bfce39ab3c16e3b20e1df6f9efe0d9ed86542fa10"),
            "bi-graph/KGdatasets, datasets/wn18.zip",
        ),
        _info(
            "CoDEx-S", (2_034, 42, 32_888, 1_827, 1_828),
            ("64f93b7f314f3936a6f65739721429db3f6a7c8f5a1e1104ec3bb544f7434f59",
             "3831c0e57daef03c3a18cdd1a72e370b496f696c5218883d35c7d2ab8a6a772c",
             "27127fcb34688c4778e88a39ef3c9b540807da846021e9d9685660ac1838aca1"),
            "tsafavi/codex, data/triples/codex-s", aliases=("codexsmall",),
        ),
        _info(
            "CoDEx-M", (17_050, 51, 185_584, 10_310, 10_311),
            ("d99c3437ab51690391a26d96976adf6e5494dba7ef6902e77000551bfa566556",
             "11c323096367354940846b9ed940c5dabddc1d20a70474222babe7e7fd28b28d",
             "0575ce05e4ce915e395bb4f708e8df9547989dd4c8c71407cbfd78c19daffcf7"),
            "tsafavi/codex, data/triples/codex-m", aliases=("codexmedium",),
        ),
    ]
}


def normalize_name(name: str) -> str:
    """Case-insensitive, hyphens/underscores/spaces/dots ignored: ``FB15k-237`` -> ``fb15k237``."""
    return re.sub(r"[-_\s.]", "", str(name)).lower()


_BY_KEY: dict[str, DatasetInfo] = {}
for _info_ in DATASETS.values():
    _BY_KEY[normalize_name(_info_.name)] = _info_
    for _alias in _info_.aliases:
        _BY_KEY[normalize_name(_alias)] = _info_


def lookup(name: str) -> DatasetInfo | None:
    """The registered dataset called ``name`` (any spelling), or None."""
    return _BY_KEY.get(normalize_name(name))


def dataset_names() -> list[str]:
    """Lower-case names of all registered datasets (``fb15k-237``, ``nations``, ...).

    Examples
    --------
    >>> dataset_names()[:3]  # the three small ones ship with kgeval
    ['nations', 'kinships', 'umls']
    """
    return [info.name.lower() for info in DATASETS.values()]


def data_dirs(data_dir: str | os.PathLike | list | tuple | None = None) -> list[Path]:
    """Directories searched for non-packaged datasets, in order.

    ``data_dir`` (a path or list of paths) when given; else the ``KGEVAL_DATA``
    environment variable (``os.pathsep``-separated list); else ``~/.kgeval/datasets``.
    """
    if data_dir is not None:
        items = [data_dir] if isinstance(data_dir, (str, os.PathLike)) else list(data_dir)
        parts: list[str] = []
        for item in items:
            parts.extend(p for p in str(item).split(os.pathsep) if p)
    elif os.environ.get(ENV_VAR):
        parts = [p for p in os.environ[ENV_VAR].split(os.pathsep) if p]
    else:
        parts = [str(DEFAULT_DATA_DIR)]
    return [Path(p).expanduser() for p in parts]


def locate(info: DatasetInfo, dirs: list[Path]) -> Path | None:
    """The first ``<dir>/<name>`` directory that exists (name matched case-insensitively)."""
    key = normalize_name(info.name)
    for base in dirs:
        exact = base / info.name
        if exact.is_dir():
            return exact
        if base.is_dir():
            for child in sorted(base.iterdir()):
                if child.is_dir() and normalize_name(child.name) == key:
                    return child
    return None
