"""Benchmark: the train-bpe deployment on a real Prefect server: a full retrain against a retrain
after one new shard arrived, and the Prefect overhead per run.

    python -m bench.pipeline [--data ../shared/corpora/en] [--vocab-size 32768] [--workers 2]

It starts a Prefect server, a process worker and a local Dask cluster (scheduler + workers) on
127.0.0.1, deploys a configuration over a copy of the corpus directory (links to its shards),
and times `prefect deployment run` from the request to the end of the run:
1. full retrain: every shard counted (an empty count cache);
2. the same data again: nothing to train ("no new data"), i.e. the cost of a scheduled run that
   finds nothing new;
3. retrain after one shard is added: only the new shard counted, the rest from the cache.
Run 3 is compared with run 1' (a full retrain over the same eight shards, cache emptied).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from bench.measure import REPO
from bpe.manifest import Manifest
from bpe.pipeline.services import (
    BIN,
    free_port,
    prefect_env,
    run_deployment,
    start_dask_scheduler,
    start_dask_worker,
    start_prefect_server,
    start_prefect_worker,
    wait_for_flow_run,
)

POOL = "bpe-bench"


def trigger(env: dict, name: str) -> dict:
    """Run the deployment; wait for the end. Returns the request-to-end time and the run's own
    start-to-end time from the API."""
    started = time.perf_counter()
    run = wait_for_flow_run(env["PREFECT_API_URL"], run_deployment(env, f"train-bpe/{name}"), poll=0.1)
    wall = time.perf_counter() - started
    if run.state.type.value != "COMPLETED":
        raise RuntimeError(f"run {run.id} ended {run.state.type.value}: {run.state.message}")
    return {"wall": wall, "run": run.total_run_time.total_seconds()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "corpora" / "en")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    shards = sorted(args.data.glob("*.parquet"))
    if len(shards) < 2:
        raise SystemExit(f"need a directory of Parquet shards at {args.data}")
    work = Path(tempfile.mkdtemp(prefix="bpe-pipeline-bench-"))
    started: list = []
    try:
        server = start_prefect_server(work / "prefect", free_port(), log=work / "server.log", ui=False)
        started.append(server)
        scheduler = start_dask_scheduler(free_port(), log=work / "scheduler.log")
        started.append(scheduler)
        for i in range(args.workers):
            started.append(start_dask_worker(scheduler.url, log=work / f"dask-worker-{i}.log"))
        env = {**prefect_env(f"{server.url}/api", work / "prefect"), "PREFECT_WORKER_QUERY_SECONDS": "1"}
        started.append(start_prefect_worker(env["PREFECT_API_URL"], work / "prefect", POOL, work / "worker.log", env))
        data = work / "data"
        data.mkdir()
        for shard in shards[:-1]:
            (data / shard.name).symlink_to(shard)
        cfg = {
            "name": "bench",
            "data": str(data),
            "vocab_size": args.vocab_size,
            "pattern": "cl100k",
            "special_tokens": ["<|endoftext|>"],
            "holdout_fraction": 0.01,
            "artifact_root": str(work / "artifacts"),
            "dask_scheduler": scheduler.url,
            "schedule": "0 * * * *",
        }
        (work / "conf").mkdir()
        (work / "conf" / "bench.yaml").write_text(yaml.safe_dump(cfg))
        deploy = [str(BIN / "bpe"), "deploy", "--conf", str(work / "conf"), "--pool", POOL]
        subprocess.run(deploy, env={**os.environ, **env}, check=True, capture_output=True, cwd=REPO)

        seven = trigger(env, "bench")  # first: all but the last shard, counted
        again = trigger(env, "bench")  # nothing new
        (data / shards[-1].name).symlink_to(shards[-1])
        one_new = trigger(env, "bench")  # the new shard counted, the rest cached
        shutil.rmtree(work / "artifacts")
        full = trigger(env, "bench")  # all shards, empty cache
        manifests = sorted((work / "artifacts" / "bench").glob("v*/manifest.json"))
        full_manifest = Manifest.from_json(json.loads(manifests[-1].read_text()))
        report(args, shards, seven, again, one_new, full, full_manifest)
    finally:
        for service in reversed(started):
            service.stop()
        shutil.rmtree(work, ignore_errors=True)


def report(args, shards, seven, again, one_new, full, manifest: Manifest) -> None:
    print(
        f"corpus {args.data}: {len(shards)} shards; vocabulary {args.vocab_size:,}; Dask: {args.workers} workers; "
        "times from `prefect deployment run` to the end of the run"
    )
    print()
    print("| run | request to end (s) | flow run (s) |")
    print("| --- | ---: | ---: |")
    rows = [
        (f"first run, {len(shards) - 1} shards, all counted", seven),
        ("same data again: no new data, nothing trained", again),
        (f"one new shard: 1 counted, {len(shards) - 1} from the cache", one_new),
        (f"full retrain: {len(shards)} shards, all counted (cache emptied)", full),
    ]
    for name, r in rows:
        print(f"| {name} | {r['wall']:.1f} | {r['run']:.1f} |")
    print()
    print(
        f"retrain after one new shard vs full retrain: {one_new['wall']:.1f} s vs {full['wall']:.1f} s "
        f"({one_new['wall'] / full['wall']:.2f}x)"
    )
    overhead = again["wall"]
    print(
        f"Prefect overhead per run: {overhead:.1f} s for a run that trains nothing (worker pick-up, process start, "
        f"flow and task bookkeeping); of a full retrain, {full['wall'] - full['run']:.1f} s pass before/after the "
        f"flow run itself"
    )
    print(f"full retrain phases (s): {json.dumps(manifest.seconds.to_json())}")


if __name__ == "__main__":
    main()
