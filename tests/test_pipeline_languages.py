"""The pipeline's evaluation by language: with `evaluation: {dev: DIR}` in a configuration, every
version records `bpe.evaluate`'s figures on the dev set in its manifest, the Prefect artifacts show
them (a table per language and a plot), the Gini coefficient is followed across versions, and a
version whose Gini rose above the promoted one's by more than `evaluation.gini_margin` is
published as usual while the deployment's webhook gets one message saying so.

Against the session's real Prefect server, process worker and Dask cluster (tests/conftest.py),
with a small HTTP receiver for the webhook (`tests.test_alerts.Receiver`): two runs of one
deployment, on English and the same English in Greek letters, the second adding English only
(the first runs its flow in this process, the second is the worker's).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from bpe import evaluate
from bpe.errors import InputError
from bpe.pipeline.alerts import gini_automation_name
from bpe.tokenizer import Tokenizer
from tests import test_pipeline
from tests.conftest import claim_deployment_names, stdlib_paragraphs
from tests.test_alerts import Receiver, automations, deploy
from tests.test_dev_set import release_later
from tests.test_pipeline import flow_here, run_deployment, run_here, write_shard

pytestmark = pytest.mark.services

services = test_pipeline.services  # the session's Prefect server, worker and Dask cluster; a directory of our own
NAME = "multilingual"
GREEK = str.maketrans("abdegiklmnoprstuz", "αβδεγικλμνοπρστυζ")


def artifacts(services, key: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: services["env"]["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            return client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))


@pytest.fixture(scope="module")
def runs(services) -> dict:
    """The deployment, deployed with an alert to a receiver, and its two runs: v0001 on English and
    Greek-lettered English, v0002 with an English-only shard added (its merges favour English, so
    the Greek sentences cost relatively more: the Gini coefficient rises well past 0.01)."""
    claim_deployment_names(__name__, NAME)
    receiver = Receiver()
    root = services["root"]
    paragraphs = stdlib_paragraphs()
    data = root / NAME / "shards"
    write_shard(data / "part-00000.parquet", paragraphs[:500] + [t.translate(GREEK) for t in paragraphs[500:1000]])
    sentences = [" ".join(t.split()[:15]) for t in paragraphs[3000:3060]]
    dev = root / NAME / "dev"
    dev.mkdir(parents=True)
    (dev / "eng.txt").write_text("\n".join(sentences) + "\n")
    (dev / "ell.txt").write_text("\n".join(t.translate(GREEK) for t in sentences) + "\n")
    cfg = {
        "name": NAME,
        "data": str(data),
        "vocab_size": 400,
        "pattern": "cl100k",
        "holdout_fraction": 0.05,
        "artifact_root": str(root / NAME / "artifacts"),
        "dask_scheduler": services["scheduler"],
        "alerts": {"webhook": f"{receiver.url}/{NAME}/hook"},
        "evaluation": {"dev": str(dev), "gini_margin": 0.01},
    }
    conf = root / "conf-languages"
    conf.mkdir()
    (conf / f"{NAME}.yaml").write_text(yaml.safe_dump(cfg))
    done = deploy(services, conf)
    assert done.returncode == 0, done.stderr[-3000:]
    # v0001, with no version before it to compare with, runs its flow here (`run_here`); v0002, whose
    # rise is alerted through the deployment's automation, is the deployment's run by the worker.
    first = run_here(services, NAME, config=conf / f"{NAME}.yaml")
    assert first["state"] == "COMPLETED", first["message"] + first["logs"][-3000:]
    write_shard(data / "part-00001.parquet", paragraphs[1000:2500])
    second = run_deployment(services, NAME)
    assert second["state"] == "COMPLETED", second["message"] + second["logs"][-3000:]
    yield {"receiver": receiver, "cfg": cfg, "dev": dev, "runs": (first, second)}
    receiver.close()


def manifest(runs, version: str) -> dict:
    return json.loads((Path(runs["cfg"]["artifact_root"]) / NAME / version / "manifest.json").read_text())


def test_each_version_records_the_figures_of_bpe_evaluate_on_the_dev_set(runs):
    root = Path(runs["cfg"]["artifact_root"]) / NAME
    for version in ("v0001", "v0002"):
        languages = manifest(runs, version)["evaluation"]["languages"]
        expected = evaluate({version: Tokenizer.load(root / version)}, runs["dev"])
        assert languages["figures"] == json.loads(json.dumps(expected.tokenizers[0].to_json()))
        assert languages["dev"]["languages"] == ["ell", "eng"] and languages["dev"]["sentences"] == 60
        assert languages["pivot"] == "eng" and languages["plot"] == "languages.png"
        assert (root / version / "languages.png").read_bytes()[:4] == b"\x89PNG"
    second = manifest(runs, "v0002")["evaluation"]["languages"]
    assert second["previous_version"] == "v0001" and second["previous_source"] == "manifest"
    assert second["previous"] == manifest(runs, "v0001")["evaluation"]["languages"]["figures"]


def test_the_artifacts_show_a_table_per_language_and_the_plot(services, runs):
    first, second = runs["runs"]
    [markdown] = [a for a in first["artifacts"] if a.type == "markdown"]
    assert "## Languages" in markdown.data
    figures = manifest(runs, "v0001")["evaluation"]["languages"]["figures"]["languages"]
    for code in ("ell", "eng"):
        row = f"| {code} | {figures[code]['tokens_per_sentence']:.1f} |  | {figures[code]['bytes_per_token']:.3f} |"
        assert row in markdown.data, markdown.data
    png = markdown.data.split("data:image/png;base64,")[-1].split(")")[0]
    assert base64.b64decode(png) == (Path(runs["cfg"]["artifact_root"]) / NAME / "v0001" / "languages.png").read_bytes()
    tables = artifacts(services, f"bpe-{NAME}-languages")
    assert len(tables) == 2  # a version per run
    latest = json.loads(tables[0].data) if isinstance(tables[0].data, str) else tables[0].data
    assert [row["language"] for row in latest] == ["ell", "eng"]


def test_a_gini_rise_past_the_margin_is_alerted_once_and_the_version_still_published(services, runs):
    receiver = runs["receiver"]
    first, second = runs["runs"]
    languages = manifest(runs, "v0002")["evaluation"]["languages"]
    assert languages["gini_rose"] == pytest.approx(languages["gini"] - languages["previous_gini"])
    assert languages["gini_rose"] > 0.01 and [row["version"] for row in languages["trend"]] == ["v0001"]
    assert manifest(runs, "v0001")["evaluation"]["languages"]["gini_rose"] is None
    assert (
        "Gini coefficient on the dev set" in second["logs"] and "Gini coefficient on the dev set" not in first["logs"]
    )
    [markdown] = [a for a in second["artifacts"] if a.type == "markdown" and "v0002" in a.data]
    assert "**Alert: the Gini coefficient rose by" in markdown.data
    assert "| v0001 | " in markdown.data and "| **v0002** (this version) |" in markdown.data  # the Gini trend

    assert len(automations(services, f"train-bpe/{NAME}")) == 1
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: services["env"]["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            assert len(client.read_automations_by_name(gini_automation_name(f"train-bpe/{NAME}"))) == 1
    path = f"/{NAME}/hook"
    receiver.wait(lambda: receiver.to(path), 120, "Gini alert")
    [(_, message)] = receiver.to(path)
    assert message["subject"] == f"train-bpe/{NAME}: Gini rose in v0002"
    assert f"{NAME} v0002: Gini coefficient on the dev set {runs['dev']} is {languages['gini']:.4f}" in message["body"]
    assert second["id"] in message["body"] and "latest: v0002" in message["body"]


def test_a_dev_set_that_is_not_parallel_fails_the_run_before_counting(prefect_server, tmp_path, monkeypatch):
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "eng.txt").write_text("one\ntwo\n")
    (dev / "hin.txt").write_text("एक\n")
    data = tmp_path / "data"
    write_shard(data / "part-00000.parquet", stdlib_paragraphs()[:50])
    config = tmp_path / "uneven.yaml"
    cfg = {"name": "uneven-dev", "data": str(data), "vocab_size": 300, "artifact_root": str(tmp_path / "art")}
    config.write_text(yaml.safe_dump({**cfg, "evaluation": {"dev": str(dev)}}))
    with flow_here(prefect_server, monkeypatch) as train_bpe:
        with pytest.raises(InputError, match=r"hin.txt has 1 line but .*eng.txt has 2: a parallel dev set"):
            train_bpe(config=str(config))
        shutil.copy(dev / "eng.txt", dev / "hin.txt")
        config.write_text(yaml.safe_dump({**cfg, "evaluation": {"dev": str(dev), "pivot": "fra"}}))
        with pytest.raises(Exception, match=r"evaluation.pivot: 'fra' is not a language of the dev set"):
            train_bpe(config=str(config))
        (dev / "hin.txt").unlink()
        os.mkfifo(dev / "hin.txt")  # reading it would wait for a writer forever
        release_later(dev / "hin.txt")
        config.write_text(yaml.safe_dump({**cfg, "evaluation": {"dev": str(dev)}}))
        with pytest.raises(InputError, match=r"hin.txt: not a regular file \(a FIFO\), so not a dev set's file$"):
            train_bpe(config=str(config))
    assert not (tmp_path / "art").exists()  # nothing staged, nothing counted into the cache
