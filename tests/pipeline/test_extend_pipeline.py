"""The pipeline's keys that change what training starts from and how: `base:` (a scheduled
deployment extends a fixed base tokenizer with the merges of its own data, and the version's
manifest records the base) and `superwords:` (a scheduled deployment trains a superword
tokenizer). Both give the merges of the library's `train` on the rows the pipeline does not hold
out. Real services: the session's Prefect server, process worker and Dask cluster."""

from __future__ import annotations

import pytest

from bpe import Tokenizer, train
from bpe.pipeline.store import VersionStore
from bpe.training.extend import Base
from tests.conftest import stdlib_paragraphs
from tests.pipeline.conftest import claim_deployment_names, deploy, pipeline_config, trained_rows, write_config
from tests.pipeline.test_pipeline import run_here

pytestmark = pytest.mark.services  # starts real services: the slow tier

NAMES = ("extended", "from-ranks", "superwords")


@pytest.fixture(scope="module")
def deployed(pipeline_services, tmp_path_factory) -> dict[str, dict]:
    """The three configurations, each over shards and a base of its own, deployed by one `bpe deploy`:
    `extended` (a base whose files record its pattern), `from-ranks` (a `.tiktoken` base, which
    records none) and `superwords` (scheduled, a superword tokenizer)."""
    claim_deployment_names(__name__, *NAMES)
    root = tmp_path_factory.mktemp("extend-pipeline")
    paragraphs = stdlib_paragraphs()
    base = train(paragraphs[3000:3600], vocab_size=400, pattern="gpt2", special_tokens=["<|endoftext|>"])
    base.save(root / "extended" / "base")
    ranks_base = train(paragraphs[3000:3600], vocab_size=400, pattern="gpt2")
    ranks_base.save(root / "from-ranks" / "base")
    configs = {
        "extended": {
            "data": paragraphs[:1200],
            "vocab_size": 520,
            "base": str(root / "extended" / "base"),
            "schedule": "17 4 * * *",
        },
        "from-ranks": {
            "data": paragraphs[:600],
            "vocab_size": 480,
            "base": str(root / "from-ranks" / "base" / "tokenizer.tiktoken"),
            "pattern": "gpt2",
        },
        "superwords": {
            "data": paragraphs[:1200],
            "vocab_size": 700,
            "special_tokens": ["<|endoftext|>"],
            "superwords": {"transition": 500, "max_words": 3},
            "schedule": "23 4 * * *",
            "eval_sizes": [300, 400, 700],
        },
    }
    conf = root / "conf"
    conf.mkdir()
    for name, settings in configs.items():
        rows = settings.pop("data")
        cfg = pipeline_config(root, pipeline_services["scheduler"], name, holdout_fraction=0.05, **settings)
        shards = [rows[i : i + 600] for i in range(0, len(rows), 600)]
        configs[name] = {**write_config(conf, cfg, shards), "rows": rows}
    done = deploy(pipeline_services, conf)
    assert done.returncode == 0, done.stderr[-3000:]
    return {**configs, "bases": {"extended": base, "from-ranks": ranks_base}}


def completed_run(pipeline_services, cfg: dict) -> VersionStore:
    """A run of the deployment's flow, here (`tests.pipeline.test_pipeline.run_here`), which completes: its store."""
    result = run_here(pipeline_services, cfg["name"], config=cfg["conf"])
    assert result["state"] == "COMPLETED", result["message"] + result["logs"][-3000:]
    return VersionStore(cfg["artifact_root"], cfg["name"])


def test_a_deployment_with_a_base_extends_it_and_records_it(pipeline_services, deployed):
    cfg, base = deployed["extended"], deployed["bases"]["extended"]
    store = completed_run(pipeline_services, cfg)
    manifest = store.manifest("v0001")
    assert manifest["base"]["source"] == cfg["base"]
    assert manifest["base"]["sha256"] == Base(Tokenizer.load(cfg["base"]), "").digest
    assert manifest["settings"]["base_merges"] == 143 and manifest["result"]["new_merges"] == 120
    tok = Tokenizer.load(store.location("v0001"))
    assert tok.vocab_size == 520 and tok.pattern == "gpt2"  # the base's pattern: the configuration names none
    assert tok.merges[:143] == base.merges and tok.special_tokens == {"<|endoftext|>": 399}
    assert [tok.token_bytes(i) for i in range(399)] == [base.token_bytes(i) for i in range(399)]
    # Counted as the base splits text (its gpt2 pattern, its special token), not with the default cl100k.
    assert tok.merges == train(trained_rows(cfg["rows"], 0.05), vocab_size=520, base=base).merges


def test_a_base_that_records_no_pattern_is_read_with_the_configurations(pipeline_services, deployed):
    """A `.tiktoken` base records no split pattern: the configuration's `pattern:` is the one it is
    read and extended with, as `bpe train --from x.tiktoken --pattern P` and `train(base=..., pattern=P)`."""
    cfg, base = deployed["from-ranks"], deployed["bases"]["from-ranks"]
    tok = Tokenizer.load(completed_run(pipeline_services, cfg).location("v0001"))
    expected = train(trained_rows(cfg["rows"], 0.05), vocab_size=480, base=cfg["base"], pattern="gpt2")
    assert tok.merges == expected.merges and tok.merges[:144] == base.merges


def test_a_scheduled_deployment_trains_a_superword_tokenizer(pipeline_services, deployed):
    """`superwords:` in the configuration: both stages counted on the workers (each cached), the
    library's merges, the transition in the evaluation and the report."""
    cfg = deployed["superwords"]
    result = run_here(pipeline_services, cfg["name"], config=cfg["conf"])
    assert result["state"] == "COMPLETED", result["message"] + result["logs"][-3000:]
    assert "superwords stage: 199 merges, split by superbpe" in result["logs"]
    store = VersionStore(cfg["artifact_root"], "superwords")
    manifest = store.manifest("v0001")
    tok = Tokenizer.load(store.location("v0001"))
    expected = train(
        trained_rows(cfg["rows"], 0.05),
        vocab_size=700,
        special_tokens=["<|endoftext|>"],
        superwords=True,
        transition=500,
        max_words=3,
    )
    assert tok == expected and tok.pattern == "superbpe"
    assert manifest.superwords.transition == 500 and [s["merges"] for s in manifest.superwords.stages] == [244, 199]
    assert manifest.settings.superwords is True and manifest.config["superwords"]["max_words"] == 3
    evaluation = manifest.evaluation
    assert evaluation["transition"] == 500 and 501 in [row["vocab_size"] for row in evaluation["curve"]]
    assert "superwords from 500 (split superbpe, at most 3 words)" in result["logs"]


def test_a_base_replaced_at_the_same_path_is_trained_from(pipeline_services, prefect_server, tmp_path, monkeypatch):
    """`base:` names a path, but what a version is trained from is the tokenizer there: after the
    directory is replaced by another tokenizer (other merges, another pattern), the next run trains
    a new version from it rather than finding "no new data"."""
    import shutil

    yaml = pytest.importorskip("yaml")
    from tests.pipeline.test_pipeline import flow_here, one_shard_config

    paragraphs = stdlib_paragraphs()
    first = train(paragraphs[3000:3600], vocab_size=400, pattern="gpt2", special_tokens=["<|endoftext|>"])
    first.save(tmp_path / "base")
    config, cfg = one_shard_config(
        tmp_path,
        pipeline_services["scheduler"],
        "rebased",
        paragraphs[:600],
        vocab_size=520,
        base=str(tmp_path / "base"),
    )
    del cfg["pattern"]  # the base's
    config.write_text(yaml.safe_dump(cfg))
    with flow_here(prefect_server, monkeypatch) as train_bpe:
        assert train_bpe(config=str(config))["version"] == "v0001"
        shutil.rmtree(tmp_path / "base")
        second = train(paragraphs[3600:4400], vocab_size=380, pattern="cl100k", special_tokens=["<|endoftext|>"])
        second.save(tmp_path / "base")
        result = train_bpe(config=str(config))
    assert result["trained"] and result["version"] == "v0002" and result["latest"] == "v0002", result
    tok = Tokenizer.load(result["location"])
    assert tok.pattern == "cl100k" and tok.merges[: len(second.merges)] == second.merges
    assert tok.merges == train(trained_rows(paragraphs[:600], 0.05), vocab_size=520, base=second).merges
    manifest = VersionStore(cfg["artifact_root"], "rebased").manifest("v0002")
    assert manifest["base"]["sha256"] == Base(Tokenizer.load(tmp_path / "base"), "").digest


def test_a_configuration_of_word_counts_trains_the_merges_of_their_text(
    pipeline_services, prefect_server, tmp_path, monkeypatch
):
    """`counts:` instead of `data:`: word counts we wrote and another engine's (string words, a word
    in several files) train, on the workers, the merges of the text they were counted from; an
    unchanged run finds no new data, and counts split with another pattern are refused in one line."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from bpe import count
    from bpe.errors import SettingsError
    from tests.pipeline.test_pipeline import flow_here

    rows = stdlib_paragraphs()[:900]
    count(rows[:500], pattern="gpt2").save(tmp_path / "ours")
    theirs = count(rows[500:], pattern="gpt2").counts.to_dict()  # as another engine writes them:
    words = sorted(theirs)  # string words, and 50 of them split over both files
    shared = [w for w in words[1::2] if theirs[w] >= 2][:50]
    parts = (
        [(w, theirs[w]) for w in words[::2]] + [(w, theirs[w] // 2) for w in shared],
        [(w, theirs[w] - theirs[w] // 2 if w in shared else theirs[w]) for w in words[1::2]],
    )
    other = tmp_path / "theirs"
    other.mkdir()
    for i, part in enumerate(parts):
        table = pa.table({"word": [w.decode() for w, _ in part], "count": [n for _, n in part]})
        pq.write_table(table, other / f"part-{i}.parquet")
    cfg = {
        "name": "from-counts",
        "counts": [str(tmp_path / "ours"), str(other)],
        "vocab_size": 600,
        "pattern": "gpt2",
        "artifact_root": str(tmp_path / "art"),
        "dask_scheduler": pipeline_services["scheduler"],
    }
    config = tmp_path / "from-counts.yaml"
    config.write_text(yaml.safe_dump(cfg))
    with flow_here(prefect_server, monkeypatch) as train_bpe:
        first = train_bpe(config=str(config))
        again = train_bpe(config=str(config))
        config.write_text(yaml.safe_dump({**cfg, "pattern": "cl100k"}))
        with pytest.raises(SettingsError) as refused:
            train_bpe(config=str(config))
    assert first["version"] == "v0001" and not again["trained"], again
    tok = Tokenizer.load(first["location"])
    assert tok.merges == train(rows, vocab_size=600, pattern="gpt2").merges
    manifest = VersionStore(cfg["artifact_root"], "from-counts").manifest("v0001")
    assert manifest["counts"]["pretokens"] == sum(count(rows, pattern="gpt2").counts.to_dict().values())
    assert str(refused.value) == (
        f"{config}: pattern: the word counts were split with 'gpt2', not 'cl100k'; set pattern to gpt2 or count "
        "the text again with it"
    )
