"""Read an offline W&B run (its ``run-<id>.wandb`` file) back with W&B's own protobuf records.

wandb 0.31 has no Python reader of its transaction log (the old ``wandb.sdk.internal.datastore`` is
gone; the Go core writes it). The format is LevelDB's log format behind a 7-byte header (``:W&B``, magic
0xBEE1, version 0): 32 KiB blocks of records ``crc32c (4) | length (2, little-endian) | type (1) | data``
with types FULL=1, FIRST=2, MIDDLE=3, LAST=4; each assembled payload is a serialised
``wandb.proto.wandb_internal_pb2.Record``. The checksum is not verified here (the test reads what it
just wrote); a malformed header or record type fails loudly.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

HEADER = struct.Struct("<4sHB")
RECORD = struct.Struct("<IHB")
BLOCK = 32768


def payloads(path: Path):
    data = Path(path).read_bytes()
    ident, magic, version = HEADER.unpack_from(data, 0)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    pos, parts = HEADER.size, []
    while pos + RECORD.size <= len(data):
        left = BLOCK - pos % BLOCK
        if left < RECORD.size:  # the block's tail is padding
            pos += left
            continue
        _, length, kind = RECORD.unpack_from(data, pos)
        if kind == 0 and length == 0:  # zero padding at the end of a block
            pos += left
            continue
        chunk = data[pos + RECORD.size:pos + RECORD.size + length]
        pos += RECORD.size + length
        assert kind in (1, 2, 3, 4), f"record type {kind} at byte {pos}"
        if kind in (1, 2):
            parts = []
        parts.append(chunk)
        if kind in (1, 4):
            yield b"".join(parts)


def _key(item) -> str:
    """A history or summary item's key: ``key``, or its ``nested_key`` path when ``key`` is empty."""
    return item.key or ".".join(item.nested_key)


def read_run(path: Path) -> dict:
    """``{"config": {...}, "history": [{key: value}], "summary": {...}, "artifacts": [...], "exit_code": int}``."""
    from wandb.proto import wandb_internal_pb2 as pb

    out = {"config": {}, "history": [], "summary": {}, "artifacts": [], "exit_code": None, "run": None}
    for payload in payloads(path):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run"] = record.run
            out["config"].update({item.key: json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "config":
            out["config"].update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "history":
            out["history"].append({_key(item): json.loads(item.value_json) for item in record.history.item})
        elif kind == "summary":
            out["summary"].update({_key(item): json.loads(item.value_json) for item in record.summary.update})
        elif kind == "artifact":
            out["artifacts"].append(record.artifact)
        elif kind == "exit":
            out["exit_code"] = record.exit.exit_code
    return out
