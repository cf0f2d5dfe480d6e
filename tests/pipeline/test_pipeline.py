"""The train-bpe pipeline against real services: a Prefect server, a process worker, and a Dask
scheduler with two workers, all on 127.0.0.1, started once for the session (tests/conftest.py)
and stopped at its end (workers first).

Each test owns a tokenizer of its own (its shards, its versions, its deployment), all deployed
at once, and makes the history it checks (a first run, then no new data, a new shard, a parameter
override or a broken shard), so the tests pass in any order. The worker runs the deployments where
the deployment is what a test checks (its schedule, parameters, concurrency, artifacts, logs); the
other runs run the same flow in this process (`run_here`), with the worker's settings.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from bpe.pipeline.services import run_deployment as start_deployment
from bpe.pipeline.services import wait_for_flow_run
from bpe.pipeline.store import VersionStore
from bpe.tokenizer import Tokenizer
from tests.conftest import stdlib_paragraphs, write_parquet
from tests.pipeline.conftest import (
    BPE,
    PIPELINE_POOL,
    REPO,
    claim_deployment_names,
    deploy,
    pipeline_config,
    write_config,
)

pytestmark = pytest.mark.services  # starts real services: the slow tier

POOL = PIPELINE_POOL


@pytest.fixture(scope="module")
def services(pipeline_services, tmp_path_factory):
    """The session's Prefect server, process worker (pool `bpe-test`) and Dask cluster (see
    tests/conftest.py `pipeline_services`), with a directory of this module's own for its data,
    configurations and artifact roots. Deployment names are unique across the modules that share
    them (tests.pipeline.test_channels, tests.pipeline.test_alerts), so no module sees another's runs or artifacts."""
    yield {**pipeline_services, "root": tmp_path_factory.mktemp("pipeline")}


NAMES = ("first", "broken", "planted", "overlap", "trend")
# The training settings of this module's and tests.pipeline.test_channels's deployments.
SETTINGS = {"vocab_size": 600, "pattern": "cl100k", "special_tokens": ["<|endoftext|>"], "holdout_fraction": 0.05}


@pytest.fixture(scope="module")
def deployed(services) -> dict[str, dict]:
    """One configuration per test, each over three Parquet shards of its own, all deployed."""
    claim_deployment_names(__name__, *NAMES, "waiting", "fresh-demo")
    root, paragraphs = services["root"], stdlib_paragraphs()
    conf = root / "conf"
    conf.mkdir()
    configs = {}
    for name in NAMES:
        cfg = pipeline_config(root, services["scheduler"], name, **SETTINGS, schedule="17 4 * * *")
        shards = [paragraphs[i * 900 : (i + 1) * 900] for i in range(3)]
        configs[name] = {**write_config(conf, cfg, shards), "paragraphs": paragraphs}
    write_config(conf, {**cfg, "name": "waiting", "data": str(root / "waiting" / "not-yet")})  # its data is not there
    # as conf/demo.yaml: the run writes the demo corpus into its data directory, which no one made
    fresh = {
        **cfg,
        "name": "fresh-demo",
        "data": str(root / "fresh-demo" / "demo-data"),
        "demo_corpus": True,
        "artifact_root": str(root / "fresh-demo" / "artifacts"),
    }
    configs["fresh-demo"] = write_config(conf, fresh)
    done = deploy(services, conf)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"registering flows/train_bpe.py:train_bpe from {REPO} on work pool {POOL}\n")
    for name in NAMES:
        line = f"deployed train-bpe/{name} (schedule '17 4 * * *', active) on work pool {POOL}"
        assert line in done.stdout, done.stdout
    configs["deploy_output"] = done.stdout
    return configs


def start_run(env: dict, deployment: str, *args: str):
    """What `prefect deployment run DEPLOYMENT [--param k=v ...]` does (a value is JSON if it
    parses, else a string), through Prefect's client in this process: the command itself costs a
    Python start and Prefect's import, about 2.5 s of a core, per run. Returns the run's id."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    parameters = {}
    for flag, pair in zip(args[::2], args[1::2], strict=True):
        assert flag in ("--param", "-p"), f"only --param k=v is understood here, not {flag}"
        key, _, value = pair.partition("=")
        try:
            parameters[key] = json.loads(value)
        except json.JSONDecodeError:
            parameters[key] = value
    with temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            found = client.read_deployment_by_name(deployment)
            return client.create_flow_run_from_deployment(found.id, parameters=parameters).id


def run_deployment(services, name: str, *args: str, timeout: float = 240, command: bool = False) -> dict:
    """Start a run of train-bpe/<name> (with `command`, by `prefect deployment run 'train-bpe/<name>'
    ...` as a user types it; otherwise as that command does, `start_run`), then wait for it to end;
    returns its state, logs and artifacts."""
    start = start_deployment if command else start_run
    return finished_run(services, name, start(services["env"], f"train-bpe/{name}", *args), timeout)


def finished_run(services, name: str, run_id, timeout: float = 240) -> dict:
    """Wait for the run `run_id` of train-bpe/<name> to end; returns its state, logs and artifacts."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, LogFilter, LogFilterFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    api_url = services["env"]["PREFECT_API_URL"]
    run = wait_for_flow_run(api_url, run_id, timeout)
    # The last lines are sent as the run's process exits: on a loaded 2-core machine (the suite on
    # three workers) that has taken more than 30 s after the run's final state.
    deadline = time.monotonic() + 90
    with temporary_settings({PREFECT_API_URL: api_url}):
        with get_client(sync_client=True) as client:
            log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id]))
            while True:  # log lines arrive in batches, the last ones when the run's process exits
                logs = client.read_logs(log_filter=log_filter)
                if any(log.message.startswith("Finished in state") and log.task_run_id is None for log in logs):
                    break
                assert time.monotonic() < deadline, "the run's last log lines never arrived"
                time.sleep(0.5)
            by_key = ArtifactFilter(key=ArtifactFilterKey(any_=[f"bpe-{name}"]))
            artifacts = client.read_artifacts(artifact_filter=by_key)
            deployment = client.read_deployment_by_name(f"train-bpe/{name}")
    return {
        "id": str(run.id),
        "tags": run.tags,
        "state": run.state.type.value,
        "message": run.state.message or "",
        "logs": "\n".join(log.message for log in logs),
        "artifacts": artifacts,
        "deployment": deployment,
    }


def run_here(services, name: str, *, config: Path | str, **parameters) -> dict:
    """A run of train-bpe/<name>'s flow in this process, with the settings the session's worker gives
    the deployment's runs (the server's API, their PREFECT_HOME and so their count cache key), the
    configuration `config` and the run's `parameters`: what a run of the deployment does, less the
    worker's poll and two Python starts, each importing Prefect (about 5 s a run on an idle machine,
    twice that under the suite's load). For the runs whose deployment is not what a test checks (one
    run of a deployment, by the worker, is `run_deployment`'s). Returns what `finished_run` returns."""
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, PREFECT_HOME, temporary_settings

    from bpe.flows.train_bpe import train_bpe

    env = services["env"]
    settings = {
        PREFECT_API_URL: env["PREFECT_API_URL"],
        PREFECT_HOME: env["PREFECT_HOME"],
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None,  # no second's wait for the heartbeat thread at the end
    }
    with temporary_settings(settings):
        state = train_bpe(config=str(config), **parameters, return_state=True)
        APILogWorker.drain_all(timeout=10)  # the run's last log lines, sent now rather than in the next batch
    return finished_run(services, name, state.state_details.flow_run_id)


def store(cfg) -> VersionStore:
    return VersionStore(cfg["artifact_root"], cfg["name"])


def first_run(services, cfg: dict, result: dict | None = None) -> dict:
    """The checks of a tokenizer's first run: `result`'s, else a run of its flow here (`run_here`)."""
    result = result or run_here(services, cfg["name"], config=cfg["conf"])
    assert result["state"] == "COMPLETED", result["message"] + result["logs"][-3000:]
    assert "training: no version yet" in result["logs"]
    assert "published" in result["tags"]
    assert store(cfg).versions() == ["v0001"]
    return result


@pytest.mark.smoke  # CI's run of a deployment: Prefect server, process worker, Dask cluster
def test_first_run_publishes_v0001(services, deployed):
    cfg = deployed["first"]
    result = first_run(services, cfg, run_deployment(services, cfg["name"], command=True))
    assert [s.schedule.cron for s in result["deployment"].schedules] == [cfg["schedule"]]
    versions = store(cfg)
    assert versions.versions() == ["v0001"] and versions.latest() == "v0001"
    version = Path(versions.path("v0001"))
    assert {p.name for p in version.iterdir()} >= {
        "merges.txt",
        "vocab.json",
        "tokenizer.json",
        "tokenizer.tiktoken",
        "manifest.json",
        "compression.png",
    }
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["prefect"]["flow_run_id"] == result["id"]
    assert manifest["config"]["vocab_size"] == 600 and manifest["engine"]["engine"] == "dask"
    assert manifest["engine"]["scheduler"] == services["scheduler"] and manifest["engine"]["workers"] == 2
    assert sorted(s["path"] for s in manifest["data"]["shards"]) == sorted(
        str(p) for p in cfg["data_dir"].glob("*.parquet")
    )
    assert manifest["data"]["counted_shards"] == 3 and manifest["data"]["cached_shards"] == 0
    assert manifest["counts"]["held_out_rows"] > 0 and manifest["evaluation"]["bytes_per_token"] > 1.5
    assert manifest["evaluation"]["previous_version"] is None
    assert {"numpy", "prefect", "dask"} <= set(manifest["versions"])
    tok = Tokenizer.load(version)
    assert tok.vocab_size == 600 and tok.decode(tok.encode("Return the value.")) == "Return the value."
    [artifact] = [a for a in result["artifacts"] if a.type == "markdown"]
    assert "# first v0001" in artifact.data and "bytes per token" in artifact.data
    assert "count" in result["logs"] and "merge" in result["logs"]


def test_a_broken_shard_fails_the_run_and_moves_nothing(services, deployed):
    cfg = deployed["broken"]
    first_run(services, cfg)
    pq.write_table(pa.table({"body": ["no text column here"]}), cfg["data_dir"] / "part-00004.parquet")
    result = run_here(services, cfg["name"], config=cfg["conf"])
    assert result["state"] == "FAILED"
    assert "part-00004.parquet: no column 'text'" in result["message"] + result["logs"]
    versions = store(cfg)
    assert versions.versions() == ["v0001"] and versions.latest() == "v0001"
    assert not [p for p in Path(versions.base).iterdir() if p.name.startswith(".v")]


class Planted:
    """What an attacker with write access to the cache would leave: unpickling it runs a command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_the_count_cache_holds_data_only_and_a_planted_pickle_runs_nothing(services, deployed):
    """Counts were once persisted as pickles that a cache hit unpickled; a file planted where those
    lived (Prefect's result record, keyed by the count key) must never be read."""
    from prefect.results import ResultRecord, ResultRecordMetadata
    from prefect.serializers import PickleSerializer

    from bpe.inputs.discover import discover
    from bpe.pipeline.config import load_config
    from bpe.pipeline.count_cache import counting_settings, shard_count_key

    cfg = deployed["planted"]
    marker = services["root"] / "planted-code-ran"
    cache = Path(cfg["artifact_root"]) / ".cache"
    counting = counting_settings(load_config(services["root"] / "conf" / "planted.yaml"))
    for shard in discover([cfg["data"]]):
        key = shard_count_key({**shard.fingerprint(), "kind": shard.kind}, counting)
        serializer = PickleSerializer(picklelib="cloudpickle")
        record = ResultRecord(
            result=Planted(marker), metadata=ResultRecordMetadata(storage_key=key, serializer=serializer)
        )
        (cache / "results").mkdir(parents=True, exist_ok=True)
        (cache / "results" / key).write_bytes(record.serialize())
    result = run_here(services, cfg["name"], config=cfg["conf"])
    assert result["state"] == "COMPLETED", result["message"] + result["logs"][-3000:]
    assert not marker.exists(), "a planted pickle was unpickled"
    assert store(cfg).manifest("v0001")["data"]["counted_shards"] == 3
    kept = [p for p in cache.rglob("*") if p.is_file() and p.parent.name != "results"]
    assert kept and all(p.suffix in (".parquet", ".json") for p in kept), kept


def test_a_deployment_whose_data_is_missing_is_registered_paused(services, deployed):
    """Rather than fail every scheduled run (an example configuration on a fresh cluster), a
    configuration whose data is not there yet is deployed with its schedule paused, and says so."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    assert "deployed train-bpe/waiting (schedule '17 4 * * *', paused: " in deployed["deploy_output"]
    assert "not-yet not found) on work pool" in deployed["deploy_output"]
    with temporary_settings({PREFECT_API_URL: services["env"]["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            assert client.read_deployment_by_name("train-bpe/waiting").paused
            assert not client.read_deployment_by_name("train-bpe/first").paused


def test_the_run_form_shows_each_setting_once_typed_with_its_configurations_value(prefect_server, tmp_path):
    """Prefect's UI shows the deployment's parameter schema as the form of a custom run: it showed
    every setting twice (within `settings` and on its own), each "of type None", no configuration's
    value, and descriptions without what was between `<` and `>` (dropped as markup)."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from bpe.pipeline.parameters import RunSettings

    claim_deployment_names(__name__, "form")
    cfg = {
        "name": "form",
        "data": str(tmp_path / "shards"),
        "vocab_size": 600,
        "pattern": "cl100k",
        "special_tokens": ["<|endoftext|>"],
        "superwords": {"transition": 500, "max_words": 3},
        "artifact_root": str(tmp_path / "artifacts"),
    }
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "form.yaml").write_text(yaml.safe_dump(cfg))
    done = deploy({"env": {"PREFECT_API_URL": prefect_server["api"]}}, tmp_path / "conf", pool="bpe-form")
    assert done.returncode == 0, done.stderr[-3000:]
    with temporary_settings({PREFECT_API_URL: prefect_server["api"]}), get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("train-bpe/form")
    form = deployment.parameter_openapi_schema
    assert list(form["properties"]) == ["config", "promote", *RunSettings.model_fields]  # each setting once
    assert deployment.parameters == {"config": str(tmp_path / "conf" / "form.yaml")}, "the form fills in nothing"

    def described(prop: dict) -> list[str]:  # every description, nested ones too
        inner = [d for kind in prop.get("anyOf", []) for d in described(kind)]
        inner += [d for nested in prop.get("properties", {}).values() for d in described(nested)]
        return [prop["description"], *inner] if "description" in prop else inner

    where = f"{tmp_path / 'conf' / 'form.yaml'} as deployed: ".replace("_", "\\_")  # as markdown shows it
    for key in RunSettings.model_fields:
        prop = form["properties"][key]
        kinds = [kind.get("type") for kind in prop.get("anyOf", [prop])]
        assert "null" not in kinds and "default" not in prop, (key, prop)  # a real type, nothing filled in
        assert where in prop["description"], key  # the configuration's value, as deployed
    for key, value in [("vocab_size", 600), ("special_tokens", ["<|endoftext|>"]), ("name", "form")]:
        assert form["properties"][key]["examples"] == [value], key  # the field's placeholder
    assert form["properties"]["vocab_size"]["type"] == "integer"
    assert form["properties"]["vocab_size"]["description"].endswith(
        f"{where}600; left empty, a run takes the configuration's value."
    )
    assert f'{where}\\["&lt;|endoftext|&gt;"\\]' in form["properties"]["special_tokens"]["description"]
    superwords = form["properties"]["superwords"]
    assert superwords["examples"] == [{"transition": 500, "pattern": "superbpe", "max_words": 3, "colon_space": False}]
    assert superwords["properties"]["max_words"]["examples"] == [4], "a section's own keys: their defaults"
    assert "train-bpe/NAME" in form["properties"]["name"]["description"]
    for description in [d for prop in form["properties"].values() for d in described(prop)]:
        assert "<" not in description and ">" not in description, description


def test_the_demo_deployment_runs_on_a_fresh_cluster_without_its_data(services, deployed):
    """`bpe cluster up` then `prefect deployment run 'train-bpe/demo'`, with no `bpe demo` run
    before: the demo's configuration says its data is the demo corpus, so the deployment is active
    and a run of its flow writes the corpus, then trains and publishes."""
    cfg = deployed["fresh-demo"]
    assert "deployed train-bpe/fresh-demo (schedule '17 4 * * *', active) on work pool" in deployed["deploy_output"]
    first_run(services, cfg)
    assert len(list(Path(cfg["data"]).glob("part-*.parquet"))) == 4


def test_two_overlapping_runs_publish_one_version(services, deployed):
    """A manual run and a scheduled tick at once: the deployment runs one at a time, so the second
    waits, then finds no new data and skips training (tagged so, publishing nothing); one version."""
    cfg = deployed["overlap"]
    api_url = services["env"]["PREFECT_API_URL"]
    ids = [start_run(services["env"], "train-bpe/overlap") for _ in range(2)]
    runs = [finished_run(services, "overlap", run_id, 300) for run_id in ids]
    assert [run["state"] for run in runs] == ["COMPLETED", "COMPLETED"], [run["message"] for run in runs]
    assert store(cfg).versions() == ["v0001"]
    [published] = [run for run in runs if "published" in run["tags"]]
    [skipped] = [run for run in runs if run is not published]
    assert "training: no version yet" in published["logs"]
    assert "no new data since v0001" in skipped["logs"] and "no-new-data" in skipped["tags"]
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        with get_client(sync_client=True) as client:
            limit = client.read_deployment_by_name("train-bpe/overlap").global_concurrency_limit
            assert limit is not None and limit.limit == 1


def markdown_cells(row: str) -> list[str]:
    """The cells of a markdown table row, split on unescaped pipes as GitHub-flavoured markdown does."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_versions_on_growing_data_are_measured_on_one_evaluation_set(services, deployed):
    """v0001 freezes its held-out rows as the evaluation set; v0002, trained on one more shard (the
    only one counted), is measured on the same rows; each manifest's figure is what encoding those rows with that
    version gives; no evaluation row is in any training count; the artifact shows the trend and
    embeds the plot."""
    from bpe.distributed.count_tasks import read_counts, read_held_out
    from bpe.inputs.discover import discover
    from bpe.pipeline.config import load_config
    from bpe.pipeline.count_cache import CountCache, counting_settings, shard_count_key
    from bpe.pipeline.report import link_target
    from bpe.pretokenize import Pretokenizer

    cfg = deployed["trend"]
    first = first_run(services, cfg)
    assert "evaluation set frozen now from v0001's held-out rows" in first["logs"]
    write_parquet(cfg["data_dir"] / "part-00003.parquet", cfg["paragraphs"][2700:3600])
    result = run_here(services, cfg["name"], config=cfg["conf"])
    assert result["state"] == "COMPLETED", result["message"] + result["logs"][-3000:]
    versions = store(cfg)
    assert versions.versions() == ["v0001", "v0002"] and versions.latest() == "v0002"
    m1, m2 = versions.manifest("v0001"), versions.manifest("v0002")
    # Only the new shard is counted; the others come from the count cache.
    assert m2["data"]["counted_shards"] == 1 and m2["data"]["cached_shards"] == 3 and len(m2["data"]["shards"]) == 4
    assert "counted 1 shard(s), 3 unchanged shard(s) from the cache" in result["logs"]
    assert "training: 1 new shard(s) (part-00003.parquet)" in result["logs"]
    assert len([a for a in result["artifacts"] if a.type == "markdown"]) == 2  # the history keeps both

    eval_dir = Path(cfg["artifact_root"]) / cfg["name"] / "eval-set"
    record = json.loads((eval_dir / "eval-set.json").read_text())
    rows = pq.read_table(eval_dir / record["parquet"]).column("text").to_pylist()
    assert record["frozen_by"] == "v0001" and record["rows"] == len(rows) > 0
    e1, e2 = m1["evaluation"], m2["evaluation"]
    assert e1["eval_set"]["fingerprint"] == e2["eval_set"]["fingerprint"] == record["fingerprint"]
    assert e1["rows"] == e2["rows"] == len(rows)
    for version, evaluation in (("v0001", e1), ("v0002", e2)):
        tok = Tokenizer.load(versions.path(version))
        encoded = sum(len(tok.encode_ordinary(t)) for t in rows)
        assert evaluation["bytes_per_token"] == round(sum(len(t.encode()) for t in rows) / encoded, 4), version
    assert [(r["version"], r["bytes_per_token"]) for r in e2["trend"]] == [("v0001", e1["bytes_per_token"])]
    assert e2["previous_version"] == "v0001" and e2["previous_bytes_per_token"] == e1["bytes_per_token"]
    assert e2["run_held_out"]["rows"] > len(rows)  # its own held-out rows include the new shard's

    # The training counts of v0002 are exactly its data's rows less the held-out ones, and every
    # occurrence of an evaluation row in that data is among the held-out ones.
    conf = load_config(services["root"] / "conf" / "trend.yaml")
    cache, counting = CountCache(conf.counts_cache), counting_settings(conf)
    trained, held = Counter(), []
    for shard in discover([cfg["data"]]):
        counts_path, held_path = cache.paths(shard_count_key({**shard.fingerprint(), "kind": shard.kind}, counting))
        trained.update(read_counts(counts_path).to_dict())
        held += read_held_out(held_path)
    assert len(held) == m2["counts"]["held_out_rows"]  # every held-out row is on record
    shards = sorted(cfg["data_dir"].glob("*.parquet"))
    data = [t for path in shards for t in pq.read_table(path).column("text").to_pylist()]
    words = Pretokenizer(cfg["pattern"], cfg["special_tokens"])
    in_data, in_held = Counter(data), Counter(held)
    assert all(in_held[t] == in_data[t] > 0 for t in rows)
    expected = Counter(w.encode() for t in data for w in words.split(t))
    expected.subtract(Counter(w.encode() for t in held for w in words.split(t)))
    assert trained == +expected

    # The artifact: the trend table, the plot embedded, a link to the version.
    [markdown] = [a.data for a in result["artifacts"] if a.type == "markdown" and "# trend v0002" in a.data]
    [uri] = re.findall(r"!\[[^\]]*\]\(data:image/png;base64,([^)]+)\)", markdown)
    assert base64.b64decode(uri).startswith(b"\x89PNG\r\n\x1a\n")
    trend = {
        re.match(r"\**(v\d+)", cells[0]).group(1): cells
        for cells in map(markdown_cells, markdown.splitlines())
        if cells and re.match(r"\**v\d+", cells[0])
    }
    assert list(trend) == ["v0001", "v0002"] and "(this version)" in trend["v0002"][0]
    assert trend["v0001"][3] == f"{e1['bytes_per_token']:.4f}"
    assert trend["v0002"][3:] == [
        f"{e2['bytes_per_token']:.4f}",
        f"{e2['bytes_per_token'] - e1['bytes_per_token']:+.4f}",
    ]
    assert f"({link_target(versions.location('v0002'))})" in markdown
    assert "compression on the evaluation set" in result["logs"]


def test_a_version_identical_to_a_published_one_is_not_published_again(tmp_path):
    """Independently of the concurrency limit (which a run started outside the deployment does not
    pass through): the publish step finds the twin and publishes nothing."""
    from bpe.manifest import Manifest
    from bpe.pipeline.version import identical_version

    versions = VersionStore(str(tmp_path), "tok")
    manifest = {
        "data": {"fingerprint": "f" * 64},
        "config": {
            "vocab_size": 600,
            "pattern": "cl100k",
            "special_tokens": [],
            "min_frequency": 1,
            "tie_break": "bytes",
            "text_column": "text",
            "holdout_fraction": 0.05,
            "schedule": "17 4 * * *",
        },
    }
    staged = versions.stage()
    (staged.directory / "manifest.json").write_text(json.dumps(manifest))
    versions.commit(staged)
    assert identical_version(versions, Manifest.from_json(manifest)) == "v0001"
    rescheduled = {**manifest, "config": {**manifest["config"], "schedule": None}}
    assert identical_version(versions, Manifest.from_json(rescheduled)) == "v0001"
    larger = {**manifest, "config": {**manifest["config"], "vocab_size": 601}}
    assert identical_version(versions, Manifest.from_json(larger)) is None
    assert identical_version(versions, Manifest.from_json({**manifest, "data": {"fingerprint": "e" * 64}})) is None
    base = {"source": "base", "sha256": "a" * 64, "vocab_size": 300, "merges": 44, "max_token_id": 299}
    assert identical_version(versions, Manifest.from_json({**manifest, "base": base})) is None  # another base


def test_bpe_deploy_without_a_server_is_an_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # no profile that names a server
    done = subprocess.run(
        [BPE, "deploy"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "bpe: error: bpe deploy: PREFECT_API_URL is not set; point it at a Prefect server "
        "(e.g. http://127.0.0.1:4200/api, as `bpe cluster up` prints)"
    ]


# -- runs of the flow in this process ------------------------------------------------------------


@contextlib.contextmanager
def flow_here(prefect_server, monkeypatch):
    """The train-bpe flow, to call in this process against the session's Prefect server (faster
    than a deployment's run: no worker poll, no process start), under a count cache key of its own.
    The runs' last log lines are sent before the block ends (not once the server may be gone)."""
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from bpe.flows.train_bpe import train_bpe

    monkeypatch.setenv("BPE_CACHE_KEY", "tests.pipeline.test_pipeline's count cache key, 32+ characters")
    with temporary_settings({PREFECT_API_URL: prefect_server["api"], PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        try:
            yield train_bpe
        finally:
            APILogWorker.drain_all(timeout=10)


REFUSED_BY_EVERY_RUN = {  # a configuration's parity or mixture -> the line every run of it fails with
    "parity: {variant: window, alpha: .inf}": "parity.alpha: expected a number above 0, got inf",
    "parity: {dev: ntrex/, ratio: {eng: 1, hin: 2}}": "parity.ratio: replaces the dev set: give a dev set or "
    "ratios, not both",
    "mix: {eng: 1, fra: 2}": "mix: fra is not one of the run's languages (eng, hin)",
}


def test_bpe_deploy_refuses_a_configuration_every_run_would_refuse(prefect_server, tmp_path, monkeypatch):
    """Checked as a run checks it before reading any data, with the run's one line: such a
    configuration was deployed, and each of its runs failed."""
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from bpe.errors import SettingsError

    claim_deployment_names(__name__, "refused")
    conf = tmp_path / "conf"
    conf.mkdir()
    config = conf / "refused.yaml"
    for keys, line in REFUSED_BY_EVERY_RUN.items():
        base = {"name": "refused", "vocab_size": 600, "languages": {"eng": "en/", "hin": "hi/"}}
        config.write_text(yaml.safe_dump(base) + keys + "\n")
        done = deploy({"env": {"PREFECT_API_URL": prefect_server["api"]}}, conf, pool="bpe-refused")
        assert (done.returncode, done.stdout, done.stderr) == (1, "", f"bpe: error: {config}: {line}\n")
        with flow_here(prefect_server, monkeypatch) as train_bpe, pytest.raises(SettingsError) as raised:
            train_bpe(config=str(config))
        assert str(raised.value) == f"{config}: {line}", "the run's own line"
    with temporary_settings({PREFECT_API_URL: prefect_server["api"]}), get_client(sync_client=True) as client:
        with pytest.raises(ObjectNotFound):
            client.read_deployment_by_name("train-bpe/refused")


def one_shard_config(tmp_path: Path, scheduler: str, name: str, rows: list[str], **settings) -> tuple[Path, dict]:
    """A configuration of one Parquet shard of `rows` (its file, and the configuration as a dict)."""
    write_parquet(tmp_path / "data" / "part-00000.parquet", rows)
    cfg = {
        "name": name,
        "data": str(tmp_path / "data"),
        "vocab_size": 400,
        "pattern": "cl100k",
        "holdout_fraction": 0.05,
        "artifact_root": str(tmp_path / "art"),
        "dask_scheduler": scheduler,
        **settings,
    }
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(cfg))
    return config, cfg


def test_a_run_that_learns_no_merges_from_its_words_fails_and_latest_stays(
    pipeline_services, prefect_server, tmp_path, monkeypatch
):
    """Counts that hold words but give no merge (here a min_frequency no pair reaches) would publish
    a tokenizer of the 256 bytes as `latest`: the run fails in one line instead, before anything
    is staged."""
    from bpe.errors import InputError

    config, cfg = one_shard_config(tmp_path, pipeline_services["scheduler"], "no-merges", stdlib_paragraphs()[:300])
    with flow_here(prefect_server, monkeypatch) as train_bpe:
        assert train_bpe(config=str(config))["version"] == "v0001"
        config.write_text(yaml.safe_dump({**cfg, "min_frequency": 10**9}))  # the main line's own setting
        with pytest.raises(InputError) as failed:
            train_bpe(config=str(config))
    message = str(failed.value)
    assert re.fullmatch(
        r"no-merges: training learned no merges from [\d,]+ distinct words \(no pair left occurs "
        r"min_frequency times\); nothing is published and latest stays v0001",
        message,
    ), message
    versions = VersionStore(cfg["artifact_root"], "no-merges")
    assert versions.versions() == ["v0001"] and versions.latest() == "v0001"
    assert not [p.name for p in Path(versions.base).iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("room", [0, 3])
def test_a_full_disk_during_export_fails_once_naming_the_version_and_publishes_nothing(
    pipeline_services, prefect_server, tmp_path, monkeypatch, small_disk, room
):
    """No room for the version (none at all, or for its lock and a file or two): the run fails at
    once (a full disk is not a transient fault: no retry) with one line naming where the version
    was going; nothing of it is left, `latest` stays, and with room again the next run publishes."""
    from bpe.errors import OutputError
    from tests.pipeline.test_count_cache import prefect_logs

    disk, fill = small_disk
    config, cfg = one_shard_config(
        tmp_path, pipeline_services["scheduler"], "full", stdlib_paragraphs()[:300], artifact_root=str(disk)
    )
    cfg["cache_dir"] = str(tmp_path / "cache")  # off the small disk: only the version's files go there
    config.write_text(yaml.safe_dump(cfg))
    with flow_here(prefect_server, monkeypatch) as train_bpe:
        assert train_bpe(config=str(config))["version"] == "v0001"
        filler = fill(room)
        config.write_text(yaml.safe_dump({**cfg, "vocab_size": 420}))
        with prefect_logs() as logs, pytest.raises(OutputError) as failed:
            train_bpe(config=str(config))
        message = str(failed.value)
        assert message.startswith(f"{disk}/full/v0002: no space left on device while ") and "\n" not in message
        assert not [line for line in logs.messages() if "Retry" in line], "a full disk was retried"
        versions = VersionStore(str(disk), "full")
        assert versions.versions() == ["v0001"] and versions.latest() == "v0001"
        left = sorted(p.name for p in (disk / "full").iterdir())
        assert left == ["eval-set", "history.jsonl", "latest", "v0001"], left
        filler.unlink()
        assert train_bpe(config=str(config))["version"] == "v0002"
    assert versions.latest() == "v0002"
