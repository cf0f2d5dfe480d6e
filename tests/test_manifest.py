"""The manifest as a type (`bpe.manifest.Manifest`): written once, read by attribute, and the JSON on
disk unchanged by it: the same keys in the same order, and whatever a reader does not know kept."""

from __future__ import annotations

import json

import pytest

from bpe import Tokenizer, train
from bpe.manifest import EngineRecord, Manifest, Seconds, SettingsRecord
from bpe.training.settings import Settings
from tests.conftest import stdlib_paragraphs

TEXTS = stdlib_paragraphs()[:300]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Tokenizer, dict]:
    """A trained tokenizer, saved; with the manifest.json it wrote."""
    tok = train(TEXTS, vocab_size=300, pattern="gpt2", special_tokens=["<|endoftext|>"])
    directory = tmp_path_factory.mktemp("tok") / "tok"
    tok.save(directory)
    return tok, json.loads((directory / "manifest.json").read_text())


def test_a_trained_manifest_has_its_sections_in_the_order_written_to_disk(saved):
    tok, on_disk = saved
    assert list(on_disk) == [
        "format",
        "created",
        "settings",
        "data",
        "counts",
        "result",
        "engine",
        "seconds",
        "versions",
        "tokenizer",
        "files",
    ]
    assert tok.manifest.to_json() == on_disk and list(tok.manifest.to_json()) == list(on_disk)
    assert list(on_disk["seconds"]) == ["compile", "count", "merge", "merge_loop", "total", "export"]


def test_sections_read_by_attribute_and_by_key_agree(saved):
    tok, on_disk = saved
    manifest = tok.manifest
    assert manifest.counts.documents == manifest["counts"]["documents"] == on_disk["counts"]["documents"]
    assert manifest.settings.pattern == "gpt2" and manifest.result.vocab_size == 300
    assert manifest.engine.engine == "local" and manifest.engine.extra == {}  # every key of the engine's is typed
    assert "truncation" not in manifest and manifest.get("truncation") is None
    assert manifest == on_disk  # as a mapping, a manifest is its JSON


def test_the_export_time_is_counted_once_in_the_total(saved):
    tok, on_disk = saved
    seconds = on_disk["seconds"]
    trained = train(TEXTS, vocab_size=300, pattern="gpt2", special_tokens=["<|endoftext|>"]).manifest.seconds
    assert trained.export is None and "export" not in trained.to_json()
    assert seconds["export"] >= 0 and seconds["total"] >= seconds["export"]
    again = Seconds.from_json({"count": 1.0, "total": 2.0})
    again.add_export(0.25)
    assert again.to_json() == {"count": 1.0, "total": 2.25, "export": 0.25}


def test_what_a_reader_does_not_know_survives_a_round_trip(saved, tmp_path):
    """Keys this version has no field for (at the top and in a section), a key an old manifest
    lacks, and a section that is not an object: read, written back, the same JSON in the same order."""
    _, on_disk = saved
    odd = {"written_by_a_later_version": {"x": [1, 2]}, **json.loads(json.dumps(on_disk))}
    del odd["counts"]["held_out_rows"]
    odd["counts"]["counted_later"] = 7
    odd["result"] = None
    manifest = Manifest.from_json(odd)
    assert manifest.to_json() == odd and list(manifest.to_json()) == list(odd)
    assert list(manifest.to_json()["counts"]) == list(odd["counts"])
    assert manifest.counts.held_out_rows is None and manifest.counts.extra == {"counted_later": 7}
    assert manifest.result is None and manifest.extra["result"] is None
    tok = Tokenizer([(104, 105)], "gpt2", manifest=odd)  # the dict a caller may still give
    tok.save(tmp_path / "tok")
    again = json.loads((tmp_path / "tok" / "manifest.json").read_text())
    rewritten = ("tokenizer", "files", "seconds")  # by save, in their place: the export time is this one's
    assert {k: v for k, v in again.items() if k not in rewritten} == {
        k: v for k, v in odd.items() if k not in rewritten
    }
    assert list(again) == list(odd) and list(again["seconds"]) == list(odd["seconds"])


def test_a_manifest_made_here_writes_its_sections_in_one_order_whatever_the_order_they_were_set_in():
    manifest = Manifest()
    assert manifest.to_json() == {} and not manifest
    manifest.files = {}
    manifest.channel = "main"
    manifest.name, manifest.version, manifest.format = "tok", "v0001", 1
    assert list(manifest.to_json()) == ["name", "version", "format", "channel", "files"]


def test_the_settings_record_has_a_field_for_every_setting():
    record = Settings(vocab_size=300, pattern="gpt2").record()
    typed = SettingsRecord(**record)  # a setting without a field would be a TypeError
    assert typed.to_json() == record and list(typed.to_json()) == list(record)
    typed.holdout_fraction = 0.05  # the pipeline's, after the rest
    assert list(typed.to_json())[-1] == "holdout_fraction"


def test_an_engine_record_keeps_the_engines_own_order():
    dask = {"scheduler": "tcp://h:8786", "cluster_started_here": False, "engine": "dask", "workers": 2, "rounds": 9}
    assert list(EngineRecord.from_json(dask).to_json()) == list(dask)
    assert EngineRecord.from_json({**dask, "merges_per_round": None}).to_json()["merges_per_round"] is None


def test_anything_but_a_json_object_is_not_a_manifest():
    with pytest.raises(ValueError, match="JSON object"):
        Manifest.from_json([1, 2])  # type: ignore[arg-type]
