"""Configurations: the files in conf/ load; bad values are refused with the file and the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from bpe.errors import SettingsError
from bpe.pipeline.config import find_configs, load_config

REPO = Path(__file__).resolve().parent.parent


def test_every_configuration_in_the_repository_loads():
    configs = find_configs(REPO / "conf")
    assert {c.name for c in configs} >= {"demo", "en"}
    for c in configs:
        assert c.vocab_size >= 256 and c.schedule and c.data


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tok.yaml"
    path.write_text(text)
    return path


BASE = "name: tok\ndata: data/\nvocab_size: 1000\n"


@pytest.mark.parametrize(
    "extra, message",
    [
        ("vocab_size: big\n", "vocab_size: expected an integer >= 256, got 'big'"),
        ("holdout_fraction: 0.7\n", "holdout_fraction: expected a number in [0, 0.5)"),
        ("pattern: '(unclosed'\n", "pattern:"),
        ("special_tokens: [1, 2]\n", "special_tokens: expected a list of strings"),
        ("schedule: every day\n", "schedule: expected a cron expression"),
        ("tie_break: random\n", "tie_break: expected one of bytes, ids"),
        ("vocab: 5\n", "unknown key 'vocab'"),
        ("name: 'a b'\n", "name: expected letters, digits"),
        ("demo_corpus: yes please\n", "demo_corpus: expected true or false"),
        ("demo_corpus: true\ndata: s3://bucket/demo/\n", "demo_corpus: true needs `data` to be one local directory"),
        ("superwords: {max_words: 3}\n", "superwords.transition: required"),
        ("superwords: {transition: 600, words: 3}\n", "superwords: unknown key 'words'"),
        ("superwords: {transition: 100}\n", "superwords.transition: expected a vocabulary size >= 256"),
        ("superwords: {transition: 600, max_words: 0}\n", "superwords.max_words: expected an integer >= 1"),
        ("superwords: {transition: 600, pattern: '(x'}\n", "superwords.pattern: not a known name"),
        ("pattern: '[[:punct:]]+'\n", "pattern: '[[:punct:]]+' holds [:punct:], which Hugging Face's regex"),
        ("superwords: {transition: 600, pattern: '[[:punct:]]'}\n", "superwords.pattern: '[[:punct:]]' holds"),
        ("superwords: {transition: 600, colon_space: maybe}\n", "superwords.colon_space: expected true or false"),
        ("superwords: 600\n", "superwords: expected a mapping with transition"),
    ],
)
def test_bad_values_name_the_file_and_the_key(tmp_path, extra, message):
    path = write(tmp_path, BASE + extra)
    with pytest.raises(SettingsError) as raised:
        load_config(path)
    assert str(raised.value).startswith(f"{path}: ") and message in str(raised.value)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("vocab_size", 10**30, "vocab_size: expected at most 4,294,967,296 tokens"),
        ("max_token_length", 10**20, "max_token_length: expected at most 2,147,483,647 bytes"),
        ("min_frequency", 2**63, "min_frequency: expected at most"),
    ],
)
def test_numbers_past_what_the_kernels_hold_are_refused_in_the_file_and_as_the_flows_parameter(
    tmp_path, key, value, message
):
    """The flow's parameters go through `load_config(path, overrides)`, as the file's keys do (once
    `vocab_size` of 10**30 reached the Dask engine's kernels as a numba TypingError)."""
    for written, overrides in ((f"{BASE}{key}: {value}\n", None), (BASE, {key: value})):
        path = write(tmp_path, written)
        with pytest.raises(SettingsError) as raised:
            load_config(path, overrides)
        assert str(raised.value).startswith(f"{path}: {message}") and raised.value.parameter == key
    with pytest.raises(SettingsError, match=r"superwords.max_words: expected at most 2,147,483,647 words"):
        load_config(write(tmp_path, BASE + f"superwords: {{transition: 600, max_words: {10**20}}}\n"))


def test_a_regex_with_capture_groups_or_an_empty_match_is_a_pattern(tmp_path):
    """Read as Hugging Face's Split reads it (tests/test_custom_patterns.py), for both stages."""
    extra = "pattern: '(\\w+)|(\\s+)'\nsuperwords: {transition: 600, pattern: '(?<=zq)|(\\w+)'}\n"
    from tokenizers import Regex, pre_tokenizers

    settings = load_config(write(tmp_path, BASE + extra)).settings()
    for stage in (settings.subword_stage(), settings.superword_stage(344)):
        split = pre_tokenizers.Split(Regex(stage.pretokenizer.regex), behavior="isolated")
        text = "zq zqa, b\n"
        assert stage.pretokenizer.split(text) == [piece for piece, _ in split.pre_tokenize_str(text)]


def test_superwords_section_gives_the_superword_settings(tmp_path):
    cfg = load_config(write(tmp_path, BASE + "superwords: {transition: 600, max_words: null}\n"))
    settings = cfg.settings()
    assert settings.superwords and settings.transition == 600 and settings.max_words is None
    assert settings.superword_pattern == "superbpe" and settings.colon_space is False
    assert cfg.training_settings()["superwords"] == {
        "transition": 600,
        "pattern": "superbpe",
        "max_words": None,
        "colon_space": False,
    }
    assert not load_config(write(tmp_path, BASE)).settings().superwords


def test_missing_required_key_and_missing_file(tmp_path):
    with pytest.raises(SettingsError, match="vocab_size: required"):
        load_config(write(tmp_path, "name: tok\ndata: x\n"))
    with pytest.raises(SettingsError, match="no such configuration file"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(SettingsError, match="not valid YAML"):
        load_config(write(tmp_path, "name: [unclosed\n"))


def test_environment_then_parameters_override(tmp_path):
    path = write(tmp_path, BASE + "dask_scheduler: null\n")
    env = {"BPE_DASK_SCHEDULER": "tcp://10.0.0.1:8786", "BPE_VOCAB_SIZE": "2000"}
    cfg = load_config(path, environ=env)
    assert cfg.dask_scheduler == "tcp://10.0.0.1:8786" and cfg.vocab_size == 2000
    cfg = load_config(path, overrides={"vocab_size": 3000, "pattern": None}, environ=env)
    assert cfg.vocab_size == 3000 and cfg.pattern == "cl100k"
    with pytest.raises(SettingsError, match="BPE_|vocab_size"):
        load_config(path, environ={"BPE_VOCAB_SIZE": "12"})
    scoped = {"BPE_DATA": "/all", "BPE_TOK_DATA": "/only-tok", "BPE_OTHER_DATA": "/other"}
    assert load_config(path, environ=scoped).data == ["/only-tok"]


def test_settings_that_only_fail_together_are_refused_on_load_naming_the_file_and_the_keys(tmp_path):
    """Once accepted by `load_config` and `bpe deploy`, and refused only when a run began, spelt as
    Python names them (`transition: ... (vocab_size less the special tokens)`)."""
    path = write(tmp_path, BASE + "special_tokens: ['<s>']\nsuperwords: {transition: 2000}\n")
    with pytest.raises(SettingsError) as raised:
        load_config(path)
    assert str(raised.value) == (
        f"{path}: superwords.transition: expected a vocabulary size from 256 (the bytes and the base's merges) "
        "to 999 (vocab_size less the special tokens), got 2,000"
    )
