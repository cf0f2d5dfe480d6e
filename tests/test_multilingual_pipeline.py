"""The train-bpe flow on a multilingual configuration (`languages:`, `mix:`, `parity:`), run in this
process against the session's Prefect server and Dask cluster: each language's shards are counted
apart and weighted by the mixture as the word buckets are built, the version's merges are those of
`train(texts={...}, mix=...)` on the same rows, a new shard of one language is the only one counted
on the next run, and a run given parity settings learns `train(..., parity_dev=...)`'s merges."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from bpe.counting import holdout_mask
from bpe.tokenizer import Tokenizer
from bpe.training import train
from tests.conftest import claim_deployment_names, stdlib_paragraphs, write_parquet

pytestmark = pytest.mark.services  # starts real services: the slow tier

VOCAB = 420
HOLDOUT = 0.05
# A second script for the tests' second language: ASCII letters as Devanagari letters.
DEVANAGARI = str.maketrans({c: chr(0x0905 + i) for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")})


def kept_rows(shards: list[Path]) -> list[str]:
    """The rows of `shards` that the pipeline trains on (those it does not hold out)."""
    rows = pa.array([t for shard in shards for t in pq.read_table(shard).column("text").to_pylist()], pa.large_string())
    return rows.filter(pa.array(~holdout_mask(rows, HOLDOUT))).to_pylist()


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
        texts = {"eng": kept_rows(eng), "hin": kept_rows(hin_shards)}
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
    from bpe.languages import LanguagePlan
    from bpe.pipeline.multilingual import count_languages
    from bpe.pretokenize import Pretokenizer

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
