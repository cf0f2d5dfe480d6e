"""The train-bpe flow on multilingual configurations, against the session's Prefect server, process
worker and Dask cluster (tests/conftest.py).

Training (`languages:`, `mix:`, `parity:`), run in this process: each language's shards are counted
apart and weighted by the mixture as the word buckets are built, the version's merges are those of
`train(texts={...}, mix=...)` on the same rows, a new shard of one language is the only one counted
on the next run, and a run given parity settings learns `train(..., parity_dev=...)`'s merges.

Evaluation by language: with `evaluation: {dev: DIR}` in a configuration, every version records
`bpe.evaluate`'s figures on the dev set in its manifest, the Prefect artifacts show them (a table
per language and a plot), the Gini coefficient is followed across versions, and a version whose
Gini rose above the promoted one's by more than `evaluation.gini_margin` is published as usual while
the deployment's webhook gets one message saying so: two runs of one deployment, on English and the
same English in Greek letters, the second adding English only (the first runs its flow in this
process, the second is the worker's), with a small HTTP receiver for the webhook
(`tests.pipeline.test_alerts.Receiver`).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from bpe import evaluate
from bpe.errors import InputError
from bpe.pipeline.alerts import gini_automation_name
from bpe.tokenizer import Tokenizer
from bpe.training.counting import holdout_mask
from bpe.training.trainer import train
from tests.conftest import stdlib_paragraphs, write_parquet
from tests.evaluation.test_dev_set import release_later
from tests.pipeline import test_pipeline
from tests.pipeline.conftest import claim_deployment_names, deploy, kept_rows, pipeline_config, write_config
from tests.pipeline.test_alerts import Receiver, automations
from tests.pipeline.test_pipeline import flow_here, run_deployment, run_here

pytestmark = pytest.mark.services  # starts real services: the slow tier

VOCAB = 420
HOLDOUT = 0.05
# A second script for the tests' second language: ASCII letters as Devanagari letters.
DEVANAGARI = str.maketrans({c: chr(0x0905 + i) for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")})


def test_languages_are_counted_apart_weighted_and_a_new_shard_is_counted_alone(
    pipeline_services, prefect_server, tmp_path
):
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from bpe.flows.train_bpe import train_bpe

    claim_deployment_names(__name__, "by-language")  # its artifacts are keyed bpe-by-language
    paragraphs = stdlib_paragraphs()
    eng = [write_parquet(tmp_path / "en" / f"part-{i}.parquet", paragraphs[i * 300 : (i + 1) * 300]) for i in range(2)]
    hindi = [p.lower().translate(DEVANAGARI) for p in paragraphs[600:900]]
    hin = [write_parquet(tmp_path / "hi" / "part-0.parquet", hindi[:150])]
    cfg = {
        "name": "by-language",
        "languages": {"hin": str(tmp_path / "hi"), "eng": str(tmp_path / "en")},
        "mix": "eng=1,hin=3",
        "vocab_size": VOCAB,
        "pattern": "cl100k",
        "holdout_fraction": HOLDOUT,
        "artifact_root": str(tmp_path / "art"),
        "dask_scheduler": pipeline_services["scheduler"],
    }
    config = tmp_path / "multilingual.yaml"
    config.write_text(yaml.safe_dump(cfg))
    settings = {PREFECT_API_URL: prefect_server["api"], PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "eng.txt").write_text("\n".join(paragraphs[900:920]), encoding="utf-8")
    (dev / "hin.txt").write_text("\n".join(p.lower().translate(DEVANAGARI) for p in paragraphs[900:920]), "utf-8")
    with temporary_settings(settings):
        first = train_bpe(config=str(config))
        hin.append(write_parquet(tmp_path / "hi" / "part-1.parquet", hindi[150:]))
        # the next run, with parity against the dev set (a parameter: an experiment)
        second = train_bpe(config=str(config), parity={"dev": str(dev), "global_merges": 20})
        again = train_bpe(config=str(config), parity={"dev": str(dev), "global_merges": 20})

    assert (first["counted_shards"], first["cached_shards"]) == (3, 0)
    assert (second["counted_shards"], second["cached_shards"]) == (1, 3)  # the new hin shard alone
    assert second["channel"] == "experiment"
    assert (again["trained"], again["version"]) == (False, second["version"])  # the data, dev set included, as then
    parity = {"parity_dev": str(dev), "global_merges": 20}
    for result, hin_shards, options in ((first, hin[:1], {}), (second, hin, parity)):
        texts = {"eng": kept_rows(eng, HOLDOUT), "hin": kept_rows(hin_shards, HOLDOUT)}
        local = train(texts=texts, mix="eng=1,hin=3", vocab_size=VOCAB, pattern="cl100k", **options)
        published = Tokenizer.load(result["location"])
        assert published.merges == local.merges
        record = published.manifest.languages
        assert record.codes == ["eng", "hin"]
        assert record.mix == {"given": "eng=1,hin=3", "weights": {"eng": 1, "hin": 3}}
        for code in ("eng", "hin"):
            counted, expected = record.by_language[code], local.manifest.languages.by_language[code]
            assert {k: counted[k] for k in ("documents", "bytes", "words", "multiplier", "share")} == {
                k: expected[k] for k in ("documents", "bytes", "words", "multiplier", "share")
            }
    assert {s["language"] for s in published.manifest.data.shards} == {"eng", "hin"}
    served = {code: entry["merges"] for code, entry in published.manifest.languages.by_language.items()}
    assert served == {code: entry["merges"] for code, entry in local.manifest.languages.by_language.items()}
    assert published.manifest.languages.parity["global_merges_made"] == 20


def test_a_language_given_as_one_text_file_is_never_held_out(local_cluster, tmp_path):
    """`languages: {eng: eng.txt, hin: hin.txt}`: the pipeline reads a text file as one document,
    and holding that document out took hin's only text ("no text to train on"). A text file read
    whole is never held out; a language whose rows the hold-out took, all of them, is named with
    `holdout_fraction` rather than blamed for holding no text. Counted as the flow counts them."""
    from bpe.distributed.count_tasks import count_shard_to_files
    from bpe.errors import InputError
    from bpe.inputs.discover import discover
    from bpe.pipeline.multilingual import count_languages
    from bpe.pretokenize import Pretokenizer
    from bpe.training.plan import LanguagePlan

    _, client = local_cluster
    candidates = (f"नमस्ते दुनिया {i}" for i in range(100_000))
    held = next(t for t in candidates if holdout_mask(pa.array([t], pa.large_string()), 0.02)[0])

    def counted(code: str, path: Path):
        [shard] = discover([str(path)])
        found = {**shard.fingerprint(), "kind": shard.kind, "language": code}
        cache = tmp_path / "cache" / path.name
        return count_shard_to_files(
            client, found, Pretokenizer("cl100k"), "text", 0.02, f"{cache}.counts.parquet", f"{cache}.held.parquet"
        )

    (tmp_path / "eng.txt").write_text("the cat sat on the mat", encoding="utf-8")
    (tmp_path / "hin.txt").write_text(held, encoding="utf-8")
    plan = LanguagePlan(codes=("eng", "hin"))
    count_languages(plan, [counted(code, tmp_path / f"{code}.txt") for code in plan.codes])
    assert [s.held_out for s in plan.stats] == [0, 0] and all(s.words > 0 for s in plan.stats)
    write_parquet(tmp_path / "hin.parquet", [held])
    plan = LanguagePlan(codes=("eng", "hin"))
    shards = [counted("eng", tmp_path / "eng.txt"), counted("hin", tmp_path / "hin.parquet")]
    with pytest.raises(InputError) as raised:
        count_languages(plan, shards)
    assert str(raised.value) == (
        f"hin: no text to train on in {tmp_path}/hin.parquet (holdout_fraction held out 1 of its 1 document(s) for "
        "evaluation; give it more documents or a lower holdout_fraction)"
    )


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
    write_parquet(data / "part-00000.parquet", paragraphs[:500] + [t.translate(GREEK) for t in paragraphs[500:1000]])
    sentences = [" ".join(t.split()[:15]) for t in paragraphs[3000:3060]]
    dev = root / NAME / "dev"
    dev.mkdir(parents=True)
    (dev / "eng.txt").write_text("\n".join(sentences) + "\n")
    (dev / "ell.txt").write_text("\n".join(t.translate(GREEK) for t in sentences) + "\n")
    cfg = pipeline_config(
        root,
        services["scheduler"],
        NAME,
        vocab_size=400,
        pattern="cl100k",
        holdout_fraction=0.05,
        alerts={"webhook": f"{receiver.url}/{NAME}/hook"},
        evaluation={"dev": str(dev), "gini_margin": 0.01},
    )
    conf = root / "conf-languages"
    conf.mkdir()
    written = write_config(conf, cfg)
    done = deploy(services, conf)
    assert done.returncode == 0, done.stderr[-3000:]
    # v0001, with no version before it to compare with, runs its flow here (`run_here`); v0002, whose
    # rise is alerted through the deployment's automation, is the deployment's run by the worker.
    first = run_here(services, NAME, config=written["conf"])
    assert first["state"] == "COMPLETED", first["message"] + first["logs"][-3000:]
    write_parquet(data / "part-00001.parquet", paragraphs[1000:2500])
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
    write_parquet(data / "part-00000.parquet", stdlib_paragraphs()[:50])
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
