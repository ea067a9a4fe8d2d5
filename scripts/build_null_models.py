"""Regenerate the shipped null-model tables (kgeval/data/null_models/*.json.gz) from the dataset files.

    python scripts/build_null_models.py [--data-dir DIR] [NAME ...]

Every registered dataset by default (Nations, Kinships and UMLS ship with kgeval; the others are
read from DIR, else $KGEVAL_DATA); a dataset whose files are absent is skipped with a note.
Prints each table's size and the time taken. ``tests/significance/test_null_model.py`` rebuilds
the tables it can and compares them with the shipped ones.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kgeval.data import DATASETS, dataset_available
from kgeval.significance.null_model import build_table
from kgeval.significance.null_tables import table_file_name, write_table

OUT = Path(__file__).resolve().parents[1] / "src" / "kgeval" / "data" / "null_models"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(DATASETS))
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    total = 0
    for name in args.names:
        if not dataset_available(name, data_dir=args.data_dir):
            print(f"{name:<10} skipped: files not found")
            continue
        start = time.perf_counter()
        size = write_table(build_table(name, data_dir=args.data_dir), args.out / table_file_name(name))
        total += size
        print(f"{name:<10} {size / 1024:7.1f} KiB  {time.perf_counter() - start:5.1f} s")
    print(f"{'total':<10} {total / 1024:7.1f} KiB")


if __name__ == "__main__":
    main()
