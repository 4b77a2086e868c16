"""Is this battery up to date? The sqlite file read directly vs MLflow's client, each in a fresh process.

A rerun whose every battery is up to date decides so before anything else
(``harness.run``); with a local sqlite store it reads the store with sqlite3 alone
(``up_to_date_without_mlflow``), because importing MLflow to ask its client costs more than the
rest of such a rerun. This measures that choice: a fresh ``python`` process that answers the
question one way, then the other (``MlflowClient.search_runs`` with the same filter
``find_battery`` uses, and the run's ``intervals.json``), in alternating order, on one store
holding ``--runs`` finished runs. Prints each side's median seconds and their ratio (client /
direct), and with ``--csv FILE`` appends them, with the date and the machine, to FILE.

Usage: ``.venv/bin/python benchmarks/up_to_date.py [--reps 5] [--runs 20] [--csv benchmarks/results/up_to_date.csv]``
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.overhead import machine  # noqa: E402

DIRECT = """
import sys
from harness.tracking.batteries import up_to_date_without_mlflow
found = up_to_date_without_mlflow(sys.argv[1], "bench", "m0", "key", "digest")
assert found is not None and found[1]["t"] == 1
"""

CLIENT = """
import json, sys
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname
from mlflow import MlflowClient
client = MlflowClient(sys.argv[1])
exp = client.get_experiment_by_name("bench")
(run,) = client.search_runs([exp.experiment_id], "tags.`gestalt.model` = 'm0'", order_by=["attributes.start_time DESC"])
assert run.info.status == "FINISHED" and run.data.tags["gestalt.records_sha256"] == "digest"
intervals = json.loads((Path(url2pathname(urlparse(run.info.artifact_uri).path)) / "intervals.json").read_text())
assert intervals["t"] == 1
"""

COLUMNS = ("date", "machine", "reps", "runs", "direct_s", "client_s", "client_over_direct")


def make_store(folder: Path, runs: int) -> str:
    """A sqlite store with ``runs`` finished battery runs (one per model), each with its tags
    and intervals.json, as a battery run leaves them."""
    import mlflow

    from harness.tracking.batteries import BATTERY_KEY, RECORDS_DIGEST
    from harness.tracking.store import open_store

    uri = f"sqlite:///{folder}/mlflow.db"
    experiment_id = open_store(uri, "bench")
    for i in range(runs):
        with mlflow.start_run(experiment_id=experiment_id, run_name=f"m{i}",
                              tags={"gestalt.model": f"m{i}", BATTERY_KEY: "key", RECORDS_DIGEST: "digest"}):
            mlflow.log_dict({"t": 1}, "intervals.json")
    return uri


def timed(script: str, uri: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", script, uri], check=True, cwd=REPO)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20, help="finished runs in the store")
    ap.add_argument("--csv", type=Path, help="append the result to this CSV file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        uri = make_store(Path(tmp), args.runs)
        sides: dict[str, list[float]] = {"direct": [], "client": []}
        for rep in range(args.reps):  # alternating order: a machine that drifts favours neither
            order = [("direct", DIRECT), ("client", CLIENT)]
            for name, script in order if rep % 2 == 0 else order[::-1]:
                sides[name].append(timed(script, uri))
    direct, client = (statistics.median(sides[k]) for k in ("direct", "client"))
    print(json.dumps({k: [round(s, 3) for s in v] for k, v in sides.items()}))
    print(f"median s: direct {direct:.2f}, MLflow client {client:.2f}; client / direct {client / direct:.2f}")
    if args.csv:
        new = not args.csv.exists()
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("a", newline="") as f:
            out = csv.writer(f)
            if new:
                out.writerow(COLUMNS)
            out.writerow([datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), machine(),
                          args.reps, args.runs, f"{direct:.3f}", f"{client:.3f}", f"{client / direct:.3f}"])


if __name__ == "__main__":
    main()
