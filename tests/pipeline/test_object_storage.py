"""Everything shared on object storage, against a real S3 endpoint: moto's standalone server on
127.0.0.1, reached through the standard AWS_* variables only.

The Dask workers are separate processes, each in a working directory and TMPDIR of its own,
sharing nothing with the driver but the scheduler address and the endpoint, as on other machines:
data, count cache, scratch (word buckets, checkpoints), versions and tokenizers are all `s3://`.
The merges must be the local engine's, a worker killed mid-loop included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from bpe import Tokenizer, storage, train
from bpe.pipeline.services import (
    free_port,
    prefect_env,
    start_dask_scheduler,
    start_dask_worker,
    start_prefect_worker,
)
from bpe.training.counting import holdout_mask
from tests.conftest import moto_s3, stdlib_paragraphs, unique_bucket, write_parquet
from tests.pipeline.conftest import claim_deployment_names

pytestmark = pytest.mark.services  # starts real services

boto3 = pytest.importorskip("boto3")
pytest.importorskip("s3fs")
pytest.importorskip("moto")

REPO = Path(__file__).resolve().parents[2]
BPE = str(Path(sys.executable).parent / "bpe")
VOCAB = 900
POOL = "bpe-s3-test"


# -- services ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3(s3_server):
    """The session's moto S3 server on 127.0.0.1 (see tests/conftest.py `s3_server`), reached
    through the AWS_* variables for the whole module, its Dask workers and Prefect worker included."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in s3_server.items():
            patch.setenv(key, value)
        yield s3_server


@pytest.fixture
def bucket(s3) -> str:
    name = unique_bucket()
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def keys(bucket: str, prefix: str = "") -> list[str]:
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def upload(local: Path, bucket: str, key: str) -> None:
    boto3.client("s3").upload_file(str(local), bucket, key)


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    return stdlib_paragraphs()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, paragraphs) -> Path:
    """Three Parquet shards on local disk: uploaded to each test's bucket, and the local oracle's input."""
    directory = tmp_path_factory.mktemp("corpus")
    for i in range(3):
        write_parquet(directory / f"part-{i:05d}.parquet", paragraphs[i * 1500 : (i + 1) * 1500])
    return directory


@pytest.fixture(scope="module")
def local(corpus) -> Tokenizer:
    """The local engine on local files: what every run on object storage must give."""
    return train(files=str(corpus), vocab_size=VOCAB, pattern="cl100k")


@pytest.fixture
def data(bucket, corpus) -> str:
    for path in sorted(corpus.iterdir()):
        upload(path, bucket, f"corpus/{path.name}")
    return f"s3://{bucket}/corpus/"


def bpe(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BPE, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env={**os.environ, **(env or {})}
    )


@pytest.fixture(scope="module")
def cluster(s3, tmp_path_factory):
    """A Dask scheduler and two workers, each worker in a directory and TMPDIR of its own."""
    root = tmp_path_factory.mktemp("cluster")
    scheduler = start_dask_scheduler(free_port(), log=root / "scheduler.log")
    workers, homes = [], []
    try:
        for i in range(2):
            home = root / f"worker-{i}"
            (home / "tmp").mkdir(parents=True)
            homes.append(home)
            environment = {**s3, "TMPDIR": str(home / "tmp")}
            workers.append(
                start_dask_worker(scheduler.url, log=root / f"worker-{i}.log", cwd=home, env=environment, wait=False)
            )
        for worker in workers:  # started together
            worker.wait_ready()
        yield {"scheduler": scheduler.url, "homes": homes, "root": root}
    finally:
        for service in [*workers, scheduler]:
            service.stop()


def files_left_in(directories: list[Path]) -> list[str]:
    """Word buckets, checkpoints or counts a worker wrote to its local disk (Dask's own files aside)."""
    found = []
    for directory in directories:
        for path in directory.rglob("*"):
            if (
                path.is_file()
                and path.suffix in (".parquet", ".npz", ".json")
                and "dask-scratch-space" not in path.parts
            ):
                found.append(str(path))
    return found


# -- the library and the command -----------------------------------------------------------------


@pytest.mark.smoke  # CI's object storage: a real S3 server
def test_train_reads_and_writes_object_storage_and_a_tokenizer_there_loads(bucket, data, local):
    done = bpe("train", data, "--vocab-size", str(VOCAB), "--out", f"s3://{bucket}/tok/")
    assert done.returncode == 0, done.stderr
    assert f"trained s3://{bucket}/tok/" in done.stdout
    assert keys(bucket, "tok/") == sorted(
        f"tok/{name}"
        for name in [
            "COMPLETE",
            "manifest.json",
            "merges.txt",
            "tokenizer.json",
            "tokenizer.tiktoken",
            "vocab.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
        ]
    )
    loaded = Tokenizer.load(f"s3://{bucket}/tok/")
    assert loaded.merges == local.merges
    text = "Return the sum of a and b; raise ValueError on <|endoftext|> inputs."
    encoded = bpe("encode", f"s3://{bucket}/tok", text)
    assert encoded.returncode == 0, encoded.stderr
    assert [int(x) for x in encoded.stdout.split()] == local.encode(text)
    decoded = bpe("decode", f"s3://{bucket}/tok", *encoded.stdout.split())
    assert decoded.stdout == text + "\n"


def test_an_existing_tokenizer_in_object_storage_is_kept_unless_forced(bucket, data):
    out = f"s3://{bucket}/tok/"
    assert bpe("train", data, "--vocab-size", "300", "--out", out, "--quiet").returncode == 0
    again = bpe("train", data, "--vocab-size", "400", "--out", out, "--quiet")
    assert again.returncode == 1 and again.stderr.strip().splitlines() == [
        f"bpe: error: {out}: already holds a tokenizer (use --force to replace it)"
    ]
    assert Tokenizer.load(out).vocab_size == 300
    forced = bpe("train", data, "--vocab-size", "400", "--out", out, "--quiet", "--force")
    assert forced.returncode == 0, forced.stderr
    assert Tokenizer.load(out).vocab_size == 400


def test_a_tokenizer_whose_upload_never_finished_is_not_loaded(bucket, data):
    out = f"s3://{bucket}/tok"
    assert bpe("train", data, "--vocab-size", "300", "--out", out, "--quiet").returncode == 0
    boto3.client("s3").delete_object(Bucket=bucket, Key="tok/COMPLETE")  # as if the upload had died before it
    with pytest.raises(Exception, match=r"incomplete \(no COMPLETE marker"):
        Tokenizer.load(out)
    done = bpe("encode", out, "hello")
    assert done.returncode == 1 and "incomplete" in done.stderr and "Traceback" not in done.stderr


def test_an_out_that_cannot_be_written_is_refused_before_counting(s3, data):
    done = bpe("train", data, "--vocab-size", "300", "--out", "s3://no-such-bucket-here/tok/")
    assert done.returncode == 1
    assert done.stderr.startswith("bpe: error: --out s3://no-such-bucket-here/tok/: cannot write there")
    assert len(done.stderr.strip().splitlines()) == 1 and "count" not in done.stderr


def test_a_listing_finds_what_was_added_since_the_last_one_in_the_same_process(bucket, corpus):
    """A long-lived process (a notebook, a worker, flow runs in one process) lists the same prefix
    again after a shard was added: the new one is found, with its size, not a stale listing."""
    from bpe.inputs.discover import discover

    first, second = sorted(corpus.iterdir())[:2]
    upload(first, bucket, f"data/{first.name}")
    assert [s.path for s in discover([f"s3://{bucket}/data/"])] == [f"s3://{bucket}/data/{first.name}"]
    upload(second, bucket, f"data/{second.name}")
    for spec in (f"s3://{bucket}/data/", f"s3://{bucket}/data/*.parquet"):
        found = discover([spec])
        assert [s.path for s in found] == [f"s3://{bucket}/data/{p.name}" for p in (first, second)], spec
        assert [s.size for s in found] == [p.stat().st_size for p in (first, second)], spec


# -- the Dask engine, shared nothing -------------------------------------------------------------


@pytest.mark.parametrize("where", ["external", "local cluster"])
def test_the_dask_engine_with_everything_on_object_storage_gives_the_local_merges(bucket, data, local, cluster, where):
    out = f"s3://{bucket}/tok/"
    engine = ["--scheduler", cluster["scheduler"]] if where == "external" else ["--workers", "2"]
    done = bpe(
        "train",
        data,
        "--engine",
        "dask",
        *engine,
        "--scratch",
        f"s3://{bucket}/scratch/",
        "--vocab-size",
        str(VOCAB),
        "--out",
        out,
        "--quiet",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert Tokenizer.load(out).merges == local.merges
    assert keys(bucket, "scratch/") == [], "the run leaves nothing in its scratch prefix"
    assert files_left_in(cluster["homes"]) == []


def test_a_worker_killed_mid_loop_is_rebuilt_from_its_checkpoint_in_object_storage(bucket, data, local, cluster):
    distributed = pytest.importorskip("distributed")
    client = distributed.Client(cluster["scheduler"])
    try:
        victim = sorted(client.run(os.getpid).values())[0]
        seen_in_scratch: list[str] = []
        log: list[str] = []
        fired: list[bool] = []

        def progress(phase: str, done: int, total: int) -> None:
            """Past a third of the merges, once every bucket has a checkpoint in the store: kill."""
            if phase == "merge" and done >= total // 3 and not fired:
                found = keys(bucket, "scratch/")
                if sum(key.endswith("/checkpoint.npz") for key in found) == 2:
                    fired.append(True)
                    seen_in_scratch.extend(found)
                    os.kill(victim, signal.SIGKILL)

        result = train(
            files=data,
            vocab_size=VOCAB,
            pattern="cl100k",
            engine="dask",
            client=client,
            scratch=f"s3://{bucket}/scratch",
            progress=progress,
            log=log.append,
            checkpoint_seconds=0.05,
            call_timeout=30,
        )
    finally:
        client.close()
    assert fired, "the merge loop ended before the kill"
    assert result.merges == local.merges
    assert result.manifest["engine"]["recoveries"] >= 1
    assert any("from its checkpoint after" in line for line in log), (log, seen_in_scratch)
    assert any(key.endswith("/checkpoint.npz") for key in seen_in_scratch), seen_in_scratch
    assert any(key.endswith("/words.parquet") for key in seen_in_scratch), seen_in_scratch
    assert keys(bucket, "scratch/") == []
    assert files_left_in(cluster["homes"]) == []


# -- the pipeline --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prefect(s3, cluster, prefect_server, tmp_path_factory):
    """A process worker of this module's own (its pool, its PREFECT_HOME, the S3 endpoint in its
    environment) on the session's Prefect server; the flow runs reach the store through AWS_* only."""
    root = tmp_path_factory.mktemp("prefect")
    api = prefect_server["api"]
    env = {**prefect_env(api, root / "home"), **s3, "PREFECT_WORKER_QUERY_SECONDS": "1"}
    worker = start_prefect_worker(api, root / "home", POOL, log=root / "worker.log", env=env)
    try:
        yield {"env": env, "home": root / "home", "root": root}
    finally:
        worker.stop()


def run(prefect, deployment: str) -> dict:
    """A run of the deployment, by this module's worker."""
    from tests.pipeline.test_pipeline import run_deployment

    return run_deployment({"env": prefect["env"]}, deployment)


def run_here(prefect, deployment: str, config: Path) -> dict:
    """A run of the deployment's flow in this process, with the worker's settings (`test_pipeline.run_here`)."""
    from tests.pipeline.test_pipeline import run_here

    return run_here({"env": prefect["env"]}, deployment, config=config)


def test_the_pipeline_keeps_data_cache_and_versions_on_object_storage(
    bucket, corpus, paragraphs, local, cluster, prefect, tmp_path
):
    claim_deployment_names(__name__, "ons3")
    for path in sorted(corpus.iterdir())[:2]:
        upload(path, bucket, f"data/{path.name}")
    root = f"s3://{bucket}/artifacts"
    cfg = {
        "name": "ons3",
        "data": [f"s3://{bucket}/data/"],
        "vocab_size": VOCAB,
        "pattern": "cl100k",
        "special_tokens": ["<|endoftext|>"],
        "holdout_fraction": 0.05,
        "artifact_root": root,
        "cache_dir": f"s3://{bucket}/cache",
        "dask_scheduler": cluster["scheduler"],
    }
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "ons3.yaml").write_text(yaml.safe_dump(cfg))
    deployed = bpe("deploy", "--conf", str(conf), "--pool", POOL, env=prefect["env"], cwd=REPO)
    assert deployed.returncode == 0, deployed.stderr[-3000:]

    # Its first two runs run the flow here, as the worker would (the endpoint in the environment
    # alike); the third, which fails, is the worker's: what Prefect keeps of it goes to the store.
    first = run_here(prefect, "ons3", conf / "ons3.yaml")
    assert first["state"] == "COMPLETED", first["message"] + first["logs"][-3000:]
    assert "counted 2 shard(s), 0 unchanged" in first["logs"]
    assert f"published ons3 v0001 at {root}/ons3/v0001" in first["logs"]
    assert "kernels loaded on 2 worker(s)" in first["logs"] or "of 2 worker(s) in" in first["logs"]
    assert f"ons3/v0001/{storage.COMPLETE}" in " ".join(keys(bucket, "artifacts/ons3/v0001/"))
    counts = keys(bucket, "cache/counts/")
    assert len([k for k in counts if k.endswith(".json")]) == 2 and all(
        k.endswith((".json", ".parquet")) for k in counts
    ), counts
    assert keys(bucket, "cache/runs/") == [], "a run's scratch is removed when it ends"

    upload(sorted(corpus.iterdir())[2], bucket, "data/part-00002.parquet")
    second = run_here(prefect, "ons3", conf / "ons3.yaml")
    assert second["state"] == "COMPLETED", second["message"] + second["logs"][-3000:]
    assert "counted 1 shard(s), 2 unchanged shard(s) from the cache" in second["logs"]
    assert "(previous v0001 at " in second["logs"], "v0001 is read back from the store to compare"

    listed = bpe("versions", f"{root}/ons3")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["v0001", "v0002"] and lines[-1].endswith("(latest)")
    # The pipeline holds out 5% of the rows (chosen by a hash of each row), so the oracle is the
    # local engine on the rows it kept.
    rows = pa.array(
        [t for shard in sorted(corpus.iterdir()) for t in pq.read_table(shard).column("text").to_pylist()],
        pa.large_string(),
    )
    kept = rows.filter(pa.array(~holdout_mask(rows, 0.05))).to_pylist()
    oracle = train(kept, vocab_size=VOCAB, pattern="cl100k", special_tokens=["<|endoftext|>"])
    assert Tokenizer.load(f"{root}/ons3/v0002").merges == oracle.merges

    broken = tmp_path / "part-00003.parquet"
    broken.write_bytes(b"PAR1 this is not a parquet file PAR1")
    upload(broken, bucket, "data/part-00003.parquet")
    failed = run(prefect, "ons3")
    assert failed["state"] == "FAILED"
    assert "part-00003.parquet" in failed["message"] + failed["logs"]
    published = keys(bucket, "artifacts/ons3/")
    assert not any(k.startswith("artifacts/ons3/v0003/") for k in published), published
    assert bpe("versions", f"{root}/ons3").stdout.splitlines()[-1].startswith("v0002")
    assert storage.read_bytes(f"{root}/ons3/latest").decode().strip() == "v0002"
    # What Prefect keeps of the failed run (its exception) is in the store too, not on a local disk.
    results = prefect["home"] / "storage"
    assert not results.exists() or not any(results.rglob("*")), sorted(results.rglob("*"))
    assert keys(bucket, "cache/prefect-results/"), "the failed run's result went to the store"
    assert files_left_in(cluster["homes"]) == []


def test_a_new_endpoint_or_credentials_get_their_own_filesystem(s3, bucket, tmp_path):
    """fsspec keeps one filesystem per set of options: a process whose AWS_ENDPOINT_URL changes
    (another store, a test's own server) must reach the new endpoint, not the one it first used."""
    storage.write_bytes(f"s3://{bucket}/first.txt", b"first")
    with moto_s3(tmp_path) as other:
        boto3.client("s3", endpoint_url=other["AWS_ENDPOINT_URL"]).create_bucket(Bucket=bucket)
        storage.write_bytes(f"s3://{bucket}/second.txt", b"second")
        assert storage.exists(f"s3://{bucket}/second.txt") and not storage.exists(f"s3://{bucket}/first.txt")
    assert storage.read_bytes(f"s3://{bucket}/first.txt") == b"first"  # back on the module's server
    assert keys(bucket) == ["first.txt"]
