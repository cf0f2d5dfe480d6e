"""Alerts and deploy hygiene: `bpe deploy` sets up, once per deployment, a Prefect automation that
POSTs a message to the configuration's webhook when a run fails or crashes; it says what it
registered (schedule, paused or active, source directory, work pool, alerts) in one line each,
without Prefect's per-deployment console output.

The service tests run against a real Prefect server, process worker and Dask cluster on 127.0.0.1
(the session's, shared with `tests.pipeline.test_pipeline`: see tests/conftest.py) and a small HTTP receiver
in a thread, which records what the server POSTs. Nothing is mocked: the server's triggers and actions
services evaluate the automation and send the message.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from bpe.errors import SettingsError
from bpe.pipeline.alerts import ENV, automation_name, webhook_for
from bpe.pipeline.config import load_config
from tests.conftest import stdlib_paragraphs
from tests.pipeline import test_pipeline
from tests.pipeline.conftest import REPO, claim_deployment_names, deploy, pipeline_config, write_config
from tests.pipeline.test_pipeline import POOL, run_deployment

services = test_pipeline.services  # the session's Prefect server, worker and Dask cluster; a directory of our own

BASE = "name: tok\ndata: data/\nvocab_size: 1000\n"


# -- the configuration key, without services ------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tok.yaml"
    path.write_text(text)
    return path


def test_the_alerts_key_takes_an_http_webhook(tmp_path):
    cfg = load_config(write(tmp_path, BASE + "alerts: {webhook: 'https://hooks.example.com/services/T0/B0/s3cret'}\n"))
    assert cfg.alerts.webhook == "https://hooks.example.com/services/T0/B0/s3cret"
    assert load_config(write(tmp_path, BASE)).alerts.webhook is None
    assert load_config(write(tmp_path, BASE + "alerts: null\n")).alerts.webhook is None


def test_the_manifests_copy_of_the_configuration_keeps_only_the_webhooks_host(tmp_path):
    """A webhook's path is its credential (Slack's are): versions' manifests must not carry it."""
    cfg = load_config(write(tmp_path, BASE + "alerts: {webhook: 'https://u:p@hooks.example.com:8443/T0/s3cret?k=v'}\n"))
    assert cfg.as_dict()["alerts"] == {"webhook": "https://hooks.example.com:8443/..."}
    assert "s3cret" not in json.dumps(cfg.as_dict())


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "{webhook: 'ftp://example.com/x'}",
            "alerts.webhook: expected an http:// or https:// URL with a host or null (no alerts), "
            "got 'ftp://example.com/x'",
        ),
        ("{webhook: 'http://'}", "alerts.webhook: expected an http:// or https:// URL with a host"),
        ("{webhook: 'example.com/hook'}", "alerts.webhook: expected an http:// or https:// URL"),
        ("{webhook: 'http://host:99999/x'}", "alerts.webhook: expected an http:// or https:// URL"),
        ("{webhook: 'http://a b/'}", "alerts.webhook: expected an http:// or https:// URL"),
        (
            "{webhook: 42}",
            "alerts.webhook: expected an http:// or https:// URL with a host or null (no alerts), got 42",
        ),
        ("{url: 'http://example.com'}", "alerts: unknown key 'url' (known: webhook)"),
        ("'http://example.com'", "alerts: expected a mapping with webhook, got 'http://example.com'"),
    ],
)
def test_a_bad_alerts_value_is_one_line_naming_the_file_and_key(tmp_path, value, message):
    path = write(tmp_path, BASE + f"alerts: {value}\n")
    with pytest.raises(SettingsError) as raised:
        load_config(path)
    assert str(raised.value).startswith(f"{path}: {message}")
    assert "\n" not in str(raised.value)


def test_the_environment_gives_a_webhook_to_configurations_without_one(tmp_path):
    own = load_config(write(tmp_path, BASE + "alerts: {webhook: 'http://own.example/h'}\n"))
    bare = load_config(write(tmp_path, BASE))
    assert webhook_for(own, {ENV: "http://env.example/h"}) == "http://own.example/h"
    assert webhook_for(bare, {ENV: "http://env.example/h"}) == "http://env.example/h"
    assert webhook_for(bare, {}) is None and webhook_for(bare, {ENV: "  "}) is None
    with pytest.raises(SettingsError) as raised:
        webhook_for(bare, {ENV: "hooks.example.com"})
    assert str(raised.value) == f"{ENV}: expected an http:// or https:// URL with a host, got 'hooks.example.com'"


# -- against a real server, worker and receiver ---------------------------------------------------


class Receiver:
    """An HTTP server on 127.0.0.1, in a thread, that records every POST: (time received, path,
    JSON body)."""

    def __init__(self) -> None:
        self.posts: list[tuple[float, str, dict]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the name http.server calls)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.posts.append((time.time(), self.path, json.loads(body or b"null")))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def to(self, path: str) -> list[tuple[float, dict]]:
        """What was POSTed to `path`, in order of arrival."""
        with self.lock:
            return [(t, body) for t, p, body in self.posts if p == path]

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> float:
        """Poll until `condition` holds; returns the seconds waited. The Prefect server evaluates
        automations in its background services: allow generously for a loaded machine."""
        started = time.monotonic()
        while not condition():
            assert time.monotonic() - started < timeout, f"no {what} within {timeout:.0f} s; received {self.posts}"
            time.sleep(0.1)
        return time.monotonic() - started

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def automations(services, name: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: services["env"]["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            return client.read_automations_by_name(automation_name(name))


def read_run(services, run_id: str):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: services["env"]["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            return client.read_flow_run(run_id)


@pytest.fixture(scope="module")
def alerting(services, receiver) -> dict:
    """Two configurations with alerts, each to a path of its own on the receiver: `alerted`, whose
    second shard has no text column, and `healthy`, whose data is fine; deployed twice."""
    claim_deployment_names(__name__, "alerted", "healthy")
    root, paragraphs = services["root"], stdlib_paragraphs()
    conf = root / "conf-alerts"
    conf.mkdir()
    configs = {}
    for name in ("alerted", "healthy"):
        alerts = {"webhook": f"{receiver.url}/{name}/s3cret-token"}
        settings = {"vocab_size": 400, "holdout_fraction": 0.05, "schedule": "17 4 * * *", "alerts": alerts}
        cfg = pipeline_config(root, services["scheduler"], name, **settings)
        shards = [paragraphs[i * 900 : (i + 1) * 900] for i in range(2)]
        configs[name] = {**write_config(conf, cfg, shards), "path": f"/{name}/s3cret-token"}
    pq.write_table(pa.table({"body": ["no text column here"]}), configs["alerted"]["data_dir"] / "part-00001.parquet")
    first = deploy(services, conf)
    assert first.returncode == 0, first.stderr[-3000:]
    ids = {name: [a.id for a in automations(services, f"train-bpe/{name}")] for name in configs}
    again = deploy(services, conf)
    assert again.returncode == 0, again.stderr[-3000:]
    return {**configs, "conf": conf, "outputs": (first, again), "first_ids": ids}


@pytest.mark.services
def test_deploy_reports_each_deployment_in_one_line_without_prefects_console_output(alerting, receiver):
    expected = [
        f"registering flows/train_bpe.py:train_bpe from {REPO} on work pool {POOL}",
        f"deployed train-bpe/alerted (schedule '17 4 * * *', active; alerts to {receiver.url}/...) on work pool {POOL}",
        f"deployed train-bpe/healthy (schedule '17 4 * * *', active; alerts to {receiver.url}/...) on work pool {POOL}",
    ]
    for done in alerting["outputs"]:  # the first deploy and the second alike
        assert done.stdout.splitlines() == expected, done.stdout
        assert done.stderr == "", done.stderr  # no "use .serve" notice, no warning, once or per deployment
        assert "s3cret" not in done.stdout


@pytest.mark.services
def test_deploying_again_keeps_one_automation_per_deployment(services, alerting, receiver):
    for name in ("alerted", "healthy"):
        found = automations(services, f"train-bpe/{name}")
        assert len(found) == 1, found
        assert [found[0].id] == alerting["first_ids"][name]  # updated in place, not created again
        assert found[0].enabled and set(found[0].trigger.expect) == {
            "prefect.flow-run.Failed",
            "prefect.flow-run.Crashed",
        }


@pytest.mark.services
def test_a_failing_run_sends_exactly_one_notification_and_a_successful_run_none(services, alerting, receiver):
    """`healthy` completes; `alerted` fails on its broken shard and its webhook gets one message
    naming the deployment, the run and the shard. Then `healthy` fails too (a broken shard added):
    its message, which the server sends after anything the earlier runs could have caused, is the
    barrier after which no second message for `alerted` and none for the successful run may come."""
    alerted, healthy = alerting["alerted"], alerting["healthy"]
    ok = run_deployment(services, "healthy")
    assert ok["state"] == "COMPLETED", ok["message"] + ok["logs"][-3000:]

    failed = run_deployment(services, "alerted")
    assert failed["state"] == "FAILED"
    waited = receiver.wait(lambda: receiver.to(alerted["path"]), 120, "notification for train-bpe/alerted")
    received, message = receiver.to(alerted["path"])[0]
    failed_at = read_run(services, failed["id"]).state.timestamp.timestamp()
    print(
        f"\nfailure alert: delivered {received - failed_at:.2f} s after the run failed "
        f"({waited:.2f} s after the test saw the run end)"
    )
    assert set(message) == {"subject", "body", "text"}
    assert "train-bpe/alerted" in message["subject"] and "failed" in message["subject"]
    shard = f"{alerted['data_dir']}/part-00001.parquet: no column 'text'"
    assert shard in message["body"], message["body"]
    assert "Deployment train-bpe/alerted" in message["body"] and failed["id"] in message["body"]
    assert message["text"] == f"{message['subject']}\n{message['body']}"

    pq.write_table(pa.table({"body": ["no text column here"]}), healthy["data_dir"] / "part-00002.parquet")
    barrier = run_deployment(services, "healthy")
    assert barrier["state"] == "FAILED"
    receiver.wait(lambda: receiver.to(healthy["path"]), 120, "notification for train-bpe/healthy")

    assert len(receiver.to(alerted["path"])) == 1, receiver.to(alerted["path"])
    [(_, healthy_message)] = receiver.to(healthy["path"])
    assert barrier["id"] in healthy_message["body"] and ok["id"] not in healthy_message["body"]
    assert {path for _, path, _ in receiver.posts} == {alerted["path"], healthy["path"]}


@pytest.mark.services
def test_without_a_webhook_deploy_says_so_once_and_drops_an_earlier_alert(services, receiver):
    """BPE_ALERT_WEBHOOK gives every configuration without one an alert; deployed again without it,
    the alert is removed (no messages the configuration no longer asks for), and one line says so."""
    claim_deployment_names(__name__, "quiet-a", "quiet-b")
    root = services["root"]
    conf = root / "conf-quiet"
    conf.mkdir()
    for name in ("quiet-a", "quiet-b"):
        cfg = {"name": name, "data": str(root / "nowhere" / name), "vocab_size": 400, "schedule": "0 3 * * *"}
        (conf / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    with_env = deploy(services, conf, **{ENV: f"{receiver.url}/from-env"})
    assert with_env.returncode == 0, with_env.stderr[-3000:]
    assert (
        f"deployed train-bpe/quiet-a (schedule '0 3 * * *', paused: {root}/nowhere/quiet-a not found; alerts to "
        f"{receiver.url}/...) on work pool {POOL}" in with_env.stdout
    ), with_env.stdout
    assert "alerts: none" not in with_env.stdout
    assert [len(automations(services, f"train-bpe/{n}")) for n in ("quiet-a", "quiet-b")] == [1, 1]

    without = deploy(services, conf)
    assert without.returncode == 0, without.stderr[-3000:]
    lines = without.stdout.splitlines()
    assert lines.count(f"alerts: none configured (set `alerts: {{webhook: URL}}` in a configuration, or {ENV})") == 1
    assert (
        f"deployed train-bpe/quiet-b (schedule '0 3 * * *', paused: {root}/nowhere/quiet-b not found) on work "
        f"pool {POOL}" in lines
    )
    assert [len(automations(services, f"train-bpe/{n}")) for n in ("quiet-a", "quiet-b")] == [0, 0]
    assert without.stderr == ""


@pytest.mark.services
def test_a_bad_webhook_is_one_line_and_registers_nothing(services):
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL, temporary_settings

    claim_deployment_names(__name__, "fine", "bad", "bare")
    conf = services["root"] / "conf-bad"
    conf.mkdir()
    good = {"name": "fine", "data": "x", "vocab_size": 400, "alerts": {"webhook": "http://127.0.0.1:9/ok"}}
    (conf / "a-fine.yaml").write_text(yaml.safe_dump(good))
    (conf / "b-bad.yaml").write_text(yaml.safe_dump({**good, "name": "bad", "alerts": {"webhook": "hooks/x"}}))
    done = deploy(services, conf)
    assert done.returncode == 1 and done.stdout == "", done.stdout  # checked before it says it registers anything
    assert done.stderr.splitlines() == [
        f"bpe: error: {conf}/b-bad.yaml: alerts.webhook: expected an http:// or https:// URL with a host or null "
        "(no alerts), got 'hooks/x'"
    ]
    with temporary_settings({PREFECT_API_URL: services["env"]["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            with pytest.raises(ObjectNotFound):  # the good one was not registered either: all are checked first
                client.read_deployment_by_name("train-bpe/fine")
    (conf / "b-bad.yaml").unlink()
    (conf / "c-bare.yaml").write_text(yaml.safe_dump({**good, "name": "bare", "alerts": None}))
    bad_env = deploy(services, conf, **{ENV: "not a url"})
    assert bad_env.returncode == 1
    assert bad_env.stderr.splitlines() == [
        f"bpe: error: {ENV}: expected an http:// or https:// URL with a host, got 'not a url'"
    ]
