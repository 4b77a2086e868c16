"""Reading a record file back: the compiled schema check (what ``validate`` runs) vs jsonschema.

Writes a JSONL file of N silhouette records (the 80 human-modal records of the test fixtures,
repeated under distinct trial ids), then reads it with ``RecordStore.read`` (every line parsed and
checked) as gestalt does, and checks the same parsed records with jsonschema's validator alone.
Prints both times per record and their ratio, the median of --reps runs each, side by side.

Usage: ``.venv/bin/python benchmarks/records.py [--n 20000] [--reps 5]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    from harness.trials.records import RecordStore, _validator
    from tests.test_cli import write_modal_human_records

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="records in the file")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        seed = RecordStore(write_modal_human_records(Path(tmp) / "seed.jsonl")).read()
        # distinct trials: the same record under model ids m0, m1, ...
        records = [{**r, "trial_id": r["trial_id"].replace(f"|{r['model']}|", f"|m{i}|")}
                   for i, r in ((i, seed[i % len(seed)]) for i in range(args.n))]
        path = Path(tmp) / "closure.nat.silhouette.jsonl"
        path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
        store, slow = RecordStore(path), _validator()
        read, checked = [], []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            assert len(store.read()) == args.n
            read.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert all(slow.is_valid(r) for r in records)
            checked.append(time.perf_counter() - t0)
    r, c = statistics.median(read), statistics.median(checked)
    print(f"{args.n} records, median of {args.reps} reps")
    print(f"RecordStore.read (parse + compiled check)  {r:7.3f} s  {r / args.n * 1e6:6.1f} us/record")
    print(f"jsonschema check alone (no parsing)        {c:7.3f} s  {c / args.n * 1e6:6.1f} us/record")
    print(f"jsonschema alone / whole read: {c / r:.1f}x")


if __name__ == "__main__":
    main()
