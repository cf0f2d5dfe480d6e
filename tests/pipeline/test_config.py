"""Configurations: the files in conf/ load; bad values are refused with the file and the key named."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bpe.errors import SettingsError
from bpe.pipeline.config import find_configs, load_config
from tests.conftest import HEADROOM, not_a_regular_file, raised_in_limits

REPO = Path(__file__).resolve().parents[2]


def test_every_configuration_in_the_repository_loads():
    configs = find_configs(REPO / "conf")
    assert {c.name for c in configs} >= {"demo", "en"}
    for c in configs:
        assert c.vocab_size >= 256 and c.schedule and (c.data or c.languages)


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
    `vocab_size` of 10**30 reached the Dask engine's kernels as a numba TypingError); an error in a
    parameter names the parameter, not the file."""
    for written, overrides, where in ((f"{BASE}{key}: {value}\n", None, "{path}: "), (BASE, {key: value}, "")):
        path = write(tmp_path, written)
        with pytest.raises(SettingsError) as raised:
            load_config(path, overrides)
        assert str(raised.value).startswith(where.format(path=path) + message) and raised.value.parameter == key
    with pytest.raises(SettingsError, match=r"superwords.max_words: expected at most 2,147,483,647 words"):
        load_config(write(tmp_path, BASE + f"superwords: {{transition: 600, max_words: {10**20}}}\n"))


def test_a_regex_with_capture_groups_or_an_empty_match_is_a_pattern(tmp_path):
    """Read as Hugging Face's Split reads it (tests/training/test_custom_patterns.py), for both stages."""
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
    with pytest.raises(SettingsError, match="^BPE_VOCAB_SIZE: expected an integer >= 256, got 12$"):
        load_config(path, environ={"BPE_VOCAB_SIZE": "12"})
    scoped = {"BPE_DATA": "/all", "BPE_TOK_DATA": "/only-tok", "BPE_OTHER_DATA": "/other"}
    assert load_config(path, environ=scoped).data == ["/only-tok"]


@pytest.mark.parametrize(
    "variable, value, expected",
    [
        ("BPE_SCHEDULE", "* * * * *", "* * * * *"),  # YAML would read `*` as an alias
        ("BPE_SCHEDULE", "*/5 * * * *", "*/5 * * * *"),
        ("BPE_TOK_SCHEDULE", "0 3 * * *", "0 3 * * *"),
        ("BPE_DATA", "*.parquet", ["*.parquet"]),
        ("BPE_DATA", "[a/, b/]", ["a/", "b/"]),  # YAML where it is YAML
        ("BPE_DATA", "s3://bucket/en: 2024/", ["s3://bucket/en: 2024/"]),  # a mapping? no: a path
        ("BPE_ARTIFACT_ROOT", "{a: [b", "{a: [b"),
        ("BPE_PATTERN", "[a-z]+|[0-9]", "[a-z]+|[0-9]"),  # a YAML list, and a regex
        ("BPE_TEXT_COLUMN", "2024", "2024"),
    ],
)
def test_an_environment_value_that_is_not_yaml_is_taken_as_the_string_it_is(tmp_path, variable, value, expected):
    key = variable.removeprefix("BPE_").removeprefix("TOK_").lower()
    given = load_config(write(tmp_path, BASE), environ={variable: value})
    assert getattr(given, "files" if key == "files" else key) == expected


@pytest.mark.parametrize(
    "environ, message",
    [
        ({"BPE_SCHEDULE": "every: day"}, "BPE_SCHEDULE: expected a cron expression such as '0 3 * * *' or null"),
        ({"BPE_TOK_VOCAB_SIZE": "big"}, "BPE_TOK_VOCAB_SIZE: expected an integer >= 256, got 'big'"),
        ({"BPE_SUPERWORDS": "{transition: 100}"}, "BPE_SUPERWORDS (superwords.transition): expected a vocabulary"),
        ({"BPE_SUPERWORDS": "{max_words: 3}"}, "BPE_SUPERWORDS (superwords.transition): required"),
        ({"BPE_SUPERWORDS": "[600]"}, "BPE_SUPERWORDS: expected a mapping with transition"),
        ({"BPE_RETENTION": "{keep: 1}"}, "BPE_RETENTION: unknown key 'keep'"),
        ({"BPE_MIX": "temperature=2"}, "BPE_MIX: expected temperature=A with A from 0 to 1"),
        ({"BPE_MIX": "temperature=0.5"}, "BPE_MIX: needs text by language (languages: or lang_dir:)"),
    ],
)
def test_an_environment_value_that_cannot_work_is_named_by_its_variable(tmp_path, environ, message):
    with pytest.raises(SettingsError) as raised:
        load_config(write(tmp_path, BASE), environ=environ)
    assert str(raised.value).startswith(message), str(raised.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"mix": "temperature=2"}, "mix: expected temperature=A with A from 0 to 1"),
        ({"parity": {"alpha": 0}}, "parity.alpha: expected a number above 0, got 0"),
        ({"languages": {"Eng": "en/"}}, "languages: 'Eng' is not a language code"),
        ({"vocab_size": 1000, "superwords": {"transition": 5000}}, "superwords.transition: expected a vocabulary"),
        ({"vocab": 5000}, "vocab: unknown parameter (known: name, "),
    ],
)
def test_a_parameter_that_cannot_work_is_named_as_the_run_names_it_not_blamed_on_the_file(tmp_path, overrides, message):
    """`prefect deployment run -p mix=...` spells it `mix`; the file holds nothing wrong."""
    path = write(tmp_path, LANGUAGES)
    with pytest.raises(SettingsError) as raised:
        load_config(path, overrides)
    assert str(raised.value).startswith(message) and str(path) not in str(raised.value), str(raised.value)


def test_a_message_naming_settings_from_several_places_spells_each_as_it_was_given(tmp_path):
    """The setting at fault says where the message starts: the file's key after the file's name."""
    mixed = write(tmp_path, LANGUAGES + "superwords: {transition: 900}\n")
    with pytest.raises(SettingsError, match=f"^{mixed}: superwords.transition: .* to 850 \\(vocab_size less"):
        load_config(mixed, {"vocab_size": 850})
    with pytest.raises(SettingsError, match=r"^superwords.transition: .* to 800 \(BPE_VOCAB_SIZE less"):
        load_config(write(tmp_path, LANGUAGES), {"superwords": {"transition": 900}}, environ={"BPE_VOCAB_SIZE": "800"})


SPECIAL = {"/dev/zero": "a character device", "fifo": "a FIFO", "directory": "a directory"}


@pytest.mark.parametrize("replacement", list(SPECIAL))
def test_a_configuration_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path, replacement):
    """/dev/zero would fill memory, a FIFO wait for a writer forever: both in a process of their own,
    under a time limit and an address-space limit, so that a regression fails the test."""
    path = tmp_path / "conf" / "tok.yaml"
    path.parent.mkdir()
    not_a_regular_file(path, replacement)
    for load in (f"load_config({str(path)!r})", f"find_configs({str(path.parent)!r})"):
        done = raised_in_limits(load, imports="bpe.pipeline.config")
        reason = f"not a regular file ({SPECIAL[replacement]}), so not a configuration file"
        assert done.stdout == f"SettingsError {path}: {reason}\n", done.stderr[-2000:]


def test_a_configuration_larger_than_any_is_refused_by_its_size(tmp_path):
    path = write(tmp_path, BASE)
    with open(path, "r+b") as f:
        f.truncate(2 * HEADROOM)  # sparse: costs no disk
    with pytest.raises(SettingsError) as raised:
        load_config(path)
    assert str(raised.value) == f"{path}: holds {2 * HEADROOM:,} bytes, more than 1 MiB (no configuration is)"
    path.write_bytes(BASE.encode() + b"name: \xff\n")
    with pytest.raises(SettingsError, match=f"^{path}: not UTF-8 text \\(byte {len(BASE) + 6}\\)$"):
        load_config(path)


def alias_bomb(levels: int = 9) -> str:
    """`special_tokens:` holding 9 ** levels strings in a few lines of YAML aliases."""
    lines = ["special_tokens:", "  - &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_once_naming_the_alias(tmp_path):
    """Nine lines that hold 387 million strings: refused in a process of its own, whose time and
    memory are limited (a message that formats the value took 35 s and ended in MemoryError)."""
    path = write(tmp_path, BASE + alias_bomb())
    started = time.monotonic()
    done = raised_in_limits(f"load_config({str(path)!r})", imports="bpe.pipeline.config")
    assert done.stdout == (
        f"SettingsError {path}: line 6: *a0 is an alias, which a configuration does not take: write the value out\n"
    ), done.stderr[-2000:]
    assert time.monotonic() - started < 15
    # in the environment, where a `*` is more often a glob or a cron field: the string it is
    with pytest.raises(SettingsError, match="^BPE_SPECIAL_TOKENS: expected a list of strings, got '\\[&a"):
        load_config(write(tmp_path, BASE), environ={"BPE_SPECIAL_TOKENS": "[&a [x, x], [*a, *a]]"})


@pytest.mark.parametrize(
    "value, variable",
    [
        ({"special_tokens": [["x"] * 1000] * 1000}, "special_tokens"),
        ({"languages": {"eng": [[str(i) for i in range(1000)]] * 1000}}, "languages"),
        ({"superwords": list(range(100_000))}, "superwords"),
    ],
)
def test_a_long_value_is_cut_in_the_one_line_that_refuses_it(tmp_path, value, variable):
    """A million items given as a parameter (or written out in a file): the message shows their start."""
    with pytest.raises(SettingsError) as raised:
        load_config(write(tmp_path, BASE), value)
    message = str(raised.value)
    assert message.startswith(f"{variable}: ") and "..." in message and len(message) < 400, message[:1000]


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


# -- text by language, the mixture and parity ----------------------------------------------------

LANGUAGES = "name: tok\nvocab_size: 1000\nlanguages: {hin: [hi/a.parquet, hi/b.parquet], eng: en/}\n"


def test_languages_give_the_text_by_language_in_the_order_of_their_codes(tmp_path):
    text = LANGUAGES + "mix: temperature=0.3\nparity: {dev: ntrex/, variant: window, window: 50}\n"
    cfg = load_config(write(tmp_path, text))
    assert cfg.data is None and cfg.language_inputs() == {"eng": ["en/"], "hin": ["hi/a.parquet", "hi/b.parquet"]}
    assert cfg.language_settings() == {
        "mix": "temperature=0.3",
        "parity": True,
        "parity_dev": "ntrex/",
        "parity_ratio": None,
        "global_merges": 0,
        "parity_variant": "window",
        "parity_window": 50,
        "parity_alpha": 2.0,
    }
    assert cfg.input_paths() == ["en/", "hi/a.parquet", "hi/b.parquet", "ntrex/"]
    # the mixture and parity decide the merges (a change retrains); the inputs are compared by content
    trained = cfg.training_settings()
    assert trained["mix"] == "temperature=0.3" and trained["parity"]["variant"] == "window"
    assert "languages" not in trained and "data" not in trained
    assert load_config(write(tmp_path, LANGUAGES + "parity: true\n")).language_settings()["parity"] is True
    assert load_config(write(tmp_path, LANGUAGES + "parity: false\n")).parity is None


def test_a_runs_inputs_replace_the_configurations_of_either_kind(tmp_path):
    by_language = load_config(write(tmp_path, BASE), {"languages": {"eng": ["en/"]}})
    assert by_language.data is None and by_language.language_inputs() == {"eng": ["en/"]}
    one_text = load_config(write(tmp_path, LANGUAGES), {"data": ["all/"]})
    assert one_text.data == ["all/"] and one_text.languages is None


def test_a_directory_of_languages_is_the_text_by_language(tmp_path):
    """`lang_dir: DIR`: a file or folder per language code in one directory, as `languages:` would
    list them; a run's inputs of another kind replace it, and a directory that holds no language
    is named with the file and the key when the run reads it."""
    ud = tmp_path / "ud"
    ud.mkdir()
    for name in ("eng.parquet", "hin.txt", "README.md", ".hidden.txt"):
        (ud / name).write_text("x")
    (ud / "tel").mkdir()
    cfg = load_config(write(tmp_path, f"name: tok\nvocab_size: 1000\nlang_dir: {ud}\nmix: temperature=0.3\n"))
    assert cfg.data is None and cfg.language_inputs() == {
        "eng": [f"{ud}/eng.parquet"],
        "hin": [f"{ud}/hin.txt"],
        "tel": [f"{ud}/tel"],
    }
    assert (
        load_config(write(tmp_path, f"name: tok\nvocab_size: 1000\nlang_dir: {ud}\n"), {"data": ["all/"]}).lang_dir
        is None
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = load_config(write(tmp_path, f"name: tok\nvocab_size: 1000\nlang_dir: {empty}\n"))
    with pytest.raises(SettingsError, match=rf"^{tmp_path}/tok.yaml: lang_dir: {empty}: holds no file or folder named"):
        cfg.language_inputs()


@pytest.mark.parametrize(
    "text, message",
    [
        (BASE + "languages: {eng: en/}\n", "languages: replaces data (the text by language); give one of them"),
        (
            "name: tok\nvocab_size: 1000\n",
            "data: required (or languages: or lang_dir: the text by language, or counts: word counts)",
        ),
        (BASE + "lang_dir: ud/\n", "lang_dir: gives the text by language; give it, languages or data, one of them"),
        ("name: tok\nvocab_size: 1000\nlanguages: {Eng: en/}\n", "languages: 'Eng' is not a language code"),
        ("name: tok\nvocab_size: 1000\nlanguages: {eng: []}\n", "languages: expected a mapping of language code"),
        ("name: tok\nvocab_size: 1000\nlanguages: [en/]\n", "languages: expected a mapping of language code"),
        (BASE + "mix: temperature=0.3\n", "mix: needs text by language (languages: or lang_dir:)"),
        (BASE + "parity: {dev: ntrex/}\n", "parity: needs text by language (languages: or lang_dir:)"),
        (LANGUAGES + "mix: temperature=3\n", "mix: expected temperature=A with A from 0 to 1"),
        (LANGUAGES + "mix: {eng: 1, hin: zero}\n", "mix: expected temperature=A or weights such as eng=1,hin=4"),
        (LANGUAGES + "parity: {variant: best}\n", "parity.variant: expected one of base, window, got 'best'"),
        (LANGUAGES + "parity: {ratio: {eng: 1, hin: -2}}\n", "parity.ratio: expected a positive number as hin's"),
        (LANGUAGES + "parity: {alpha: 0}\n", "parity.alpha: expected a number above 0"),
        (LANGUAGES + "parity: {windows: 5}\n", "parity: unknown key 'windows'"),
    ],
)
def test_bad_language_settings_name_the_file_and_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as raised:
        load_config(path)
    assert str(raised.value).startswith(f"{path}: ") and message in str(raised.value), str(raised.value)


def test_the_multilingual_deployment_trains_on_the_shared_corpora_with_their_dev_set():
    """conf/multilingual.yaml names a UD treebank per language and the NTREX dev set, beside the
    checkout (`../shared`): every input is there, and the dev set holds exactly its languages."""
    from bpe.pipeline.multilingual import language_plan
    from tests.conftest import SHARED

    ud, ntrex = SHARED / "corpora" / "ud", SHARED / "corpora" / "ntrex"
    if not (ud / "eng.parquet").exists() or not (ntrex / "eng.txt").exists():
        pytest.skip(f"shared UD corpora or NTREX dev set not found under {SHARED / 'corpora'}")
    cfg = load_config(REPO / "conf" / "multilingual.yaml")
    assert cfg.vocab_size == 8192 and cfg.parity is not None and cfg.parity.variant == "base"
    here = {  # its paths, relative to the repository's parent, where the shared resources may be elsewhere
        code: [str(SHARED / path.removeprefix("../shared/")) for path in paths]
        for code, paths in cfg.language_inputs().items()
    }
    assert all(Path(path).is_file() for paths in here.values() for path in paths)
    cfg = load_config(REPO / "conf" / "multilingual.yaml", {"languages": here, "parity": {"dev": str(ntrex)}})
    plan = language_plan(cfg, cfg.settings())
    assert len(plan.codes) == 18 and plan.codes == tuple(sorted(plan.codes)) and len(plan.dev) == 18
    assert [f["sentences"] for f in plan.dev_record["files"].values()] == [1997] * 18


def test_word_counts_replace_the_text_and_refuse_what_needs_it(tmp_path):
    """`counts:` trains on word counts instead of `data:` (no row is held out: counts hold none);
    a key that needs the text beside it is one line naming the file and the key."""
    counts = "name: tok\nvocab_size: 1000\ncounts: [counts/, more/*.parquet]\n"
    cfg = load_config(write(tmp_path, counts))
    assert cfg.counts == ["counts/", "more/*.parquet"] and cfg.data is None and cfg.holdout_fraction == 0
    assert "counts" not in cfg.training_settings()  # compared by its files' content, as `data` is
    assert load_config(write(tmp_path, BASE), {"counts": ["c/"]}).data is None  # a run's counts replace the data
    path = write(tmp_path, counts + "holdout_fraction: 0.05\n")
    with pytest.raises(SettingsError) as refused:
        load_config(path)
    assert str(refused.value) == (
        f"{path}: holdout_fraction: needs rows of text held out, and counts trains on word counts, which hold none; "
        "leave out one of them"
    )
    for extra, key in (
        ("data: x/\n", "data"),
        ("superwords: true\n", "superwords"),
        ("eval_sizes: [300]\n", "eval_sizes"),
    ):
        with pytest.raises(SettingsError, match=f"^{tmp_path}.*: {key}: needs .* leave out one of them$"):
            load_config(write(tmp_path, counts + extra))
    with pytest.raises(SettingsError, match="^BPE_HOLDOUT_FRACTION: needs rows of text"):
        load_config(write(tmp_path, counts), environ={"BPE_HOLDOUT_FRACTION": "0.1"})
