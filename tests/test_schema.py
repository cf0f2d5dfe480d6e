"""The schema (`bpe.schema`, and the pipeline's own keys in `bpe.pipeline.config`): each setting is
declared once, and every surface has it where the declaration says, with its spelling, default and
doc: `train()`'s signature, `Settings`, the manifest's record, `bpe train`'s options, a
configuration's keys, the train-bpe flow's parameters and the reference page. A setting declared and
missing from a surface fails here, naming the surface; so does a surface that has a setting the
schema does not declare."""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from bpe.cli import build_parser
from bpe.cli.flags import IN_FLAGS
from bpe.cli.train import given_settings
from bpe.manifest import SettingsRecord
from bpe.pipeline.config import (
    CONFIG_SETTINGS,
    IN_KEYS,
    PIPELINE_SETTINGS,
    SECTION_CLASSES,
    TokenizerConfig,
    config_value,
    load_config,
)
from bpe.pipeline.parameters import RunSettings, overrides, plain
from bpe.pipeline.reference import settings_reference
from bpe.schema import RESOLVED, SETTING, SETTINGS, On, Setting
from bpe.training.settings import Settings
from bpe.training.trainer import train

REPO = Path(__file__).resolve().parent.parent
EVERY = {setting.name: setting for setting in (*SETTINGS, *PIPELINE_SETTINGS)}
NOT_SETTINGS = {"texts", "progress", "engine_options"}  # what train() reads and reports, and engine objects
COMMAND_OPTIONS = {"help", "out", "force", "json", "quiet", "also_save"}  # `bpe train`'s own
BASE_CONFIG = {"name": "tok", "data": "data/", "vocab_size": 50000}


def train_parser():
    return build_parser()._subparsers._group_actions[0].choices["train"]


def same(a, b) -> bool:
    """Equal, a tuple default and a list value alike."""
    return (list(a) if isinstance(a, tuple) else a) == (list(b) if isinstance(b, tuple) else b)


def argv(setting: Setting) -> list[str]:
    """The command line that gives `setting` its example."""
    value = setting.example
    if setting.keys:
        return [a for key, token in value.items() for a in (setting.flag.format(key), token)]
    if isinstance(value, dict):  # --lang eng=en/: the flag once per key
        return [a for key, (path,) in value.items() for a in (setting.flag, f"{key}={path}")]
    if not setting.flag.startswith("-"):
        return list(value)
    if setting.type is bool:
        return [setting.flag]
    if isinstance(value, list):
        return [a for item in value for a in (setting.flag, str(item))]
    return [setting.flag, str(value)]


def nested(setting: Setting, value) -> dict:
    """A configuration's keys that give `setting` the value (a section's key inside its section)."""
    head, _, tail = setting.key.partition(".")
    if head == "superwords":  # the section a superword run needs, with its transition
        section = {"transition": EVERY["transition"].example}
        return {head: section if not tail else {**section, tail: value}}
    if head == "parity":  # the section, present, turns parity on
        return {head: {} if not tail else {tail: value}}
    if head == "evaluation":  # the section holds its dev set whenever it is given
        return {head: {"dev": EVERY["evaluation_dev"].example, tail: value}}
    return {head: {tail: value}} if tail else {head: value}


def base_config(setting: Setting) -> dict:
    """A configuration `setting` can be given in: a multilingual run's settings need text by
    language (`languages:` or `lang_dir:`, which replace `data:`), and `counts:` replaces `data:` too."""
    if setting.name == "counts":
        return {key: value for key, value in BASE_CONFIG.items() if key != "data"}
    if setting.group != "languages":
        return dict(BASE_CONFIG)
    config = {key: value for key, value in BASE_CONFIG.items() if key != "data"}
    return config if setting.name in ("languages", "lang_dir") else {**config, "languages": EVERY["languages"].example}


def first_cells() -> set[str]:
    """Each spelling the reference page's tables give in their first column (`` `name` ``)."""
    rows = (line.split(" | ")[0] for line in settings_reference().splitlines() if line.startswith("| "))
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row)}


def missing_from(setting: Setting, tmp_path) -> list[str]:
    """The surfaces the schema puts `setting` on that do not have it as declared."""
    missing = []
    parameters = inspect.signature(train).parameters
    if On.TRAIN in setting.on and not (
        setting.name in parameters and same(parameters[setting.name].default, setting.default)
    ):
        missing.append("train()")
    settings_fields = {f.name: f.default for f in fields(Settings)}
    if On.SETTINGS in setting.on and not (
        setting.name in settings_fields and same(settings_fields[setting.name], setting.default)
    ):
        missing.append("Settings")
    if On.RECORD in setting.on and setting.name not in {f.name for f in fields(SettingsRecord)}:
        missing.append("SettingsRecord")
    if On.CLI in setting.on:
        options = {o for a in train_parser()._actions for o in (*a.option_strings, a.dest)}
        parsed = None
        if set(setting.flags.values()) <= options:
            required = [] if setting.name == "files" else ["corpus.txt"]
            vocab = [] if setting.name == "vocab_size" else ["--vocab-size", "300"]
            parsed = given_settings(train_parser().parse_args([*argv(setting), *vocab, "--out", "o", *required]))
        if parsed is None or not same(parsed[setting.name], setting.example):
            missing.append("bpe train")
    if On.YAML in setting.on:
        path = tmp_path / f"{setting.name}.yaml"
        path.write_text(yaml.safe_dump({**base_config(setting), **nested(setting, setting.example)}))
        if not same(config_value(load_config(path), setting), setting.example):
            missing.append("configuration")
    if On.FLOW in setting.on:
        head = setting.key.split(".")[0]
        value = nested(setting, setting.example)[head]
        path = tmp_path / f"flow-{setting.name}.yaml"
        path.write_text(yaml.safe_dump(base_config(setting)))
        if head not in RunSettings.model_fields:
            missing.append("flow")
        else:
            given = getattr(RunSettings(**{head: value}), head)  # the parameter, as Prefect hands it to the flow
            if not same(config_value(load_config(path, overrides({head: given})), setting), setting.example):
                missing.append("flow")
    if not any(spelling in first_cells() for spelling in (setting.name, setting.key, setting.flag)):
        missing.append("reference page")
    return missing


@pytest.mark.parametrize("name", list(EVERY))
def test_every_setting_is_on_every_surface_the_schema_puts_it_on(name, tmp_path):
    """Each with its default, and a value given on the surface reaches what the surface makes."""
    setting = EVERY[name]
    assert setting.example is not None and not same(setting.example, setting.default), "give it an example"
    assert missing_from(setting, tmp_path) == []


def test_no_surface_has_a_setting_the_schema_does_not_declare():
    trained = {name for name in inspect.signature(train).parameters if name not in NOT_SETTINGS}
    assert trained == {s.name for s in SETTINGS if On.TRAIN in s.on}
    assert {f.name for f in fields(Settings)} == {s.name for s in (*SETTINGS, *RESOLVED) if On.SETTINGS in s.on}
    recorded = {s.name for s in (*SETTINGS, *RESOLVED) if On.RECORD in s.on}
    assert {f.name for f in fields(SettingsRecord) if f.name not in ("extra", "_read")} == recorded | {
        "regex",
        "superword_regex",
    }
    dests = {a.dest for a in train_parser()._actions} - COMMAND_OPTIONS
    flagged = {dest for s in SETTINGS if On.CLI in s.on for dest in s.flags}
    assert dests == {d if d != "files" else "inputs" for d in flagged}
    keys = {f.name for f in fields(TokenizerConfig)} - {"source", "origins"}
    assert keys == {s.key.split(".")[0] for s in CONFIG_SETTINGS}
    for section, cls in SECTION_CLASSES.items():
        assert {f.name for f in fields(cls)} == {
            s.key.split(".", 1)[1] for s in CONFIG_SETTINGS if s.key.startswith(section + ".")
        }
    assert set(RunSettings.model_fields) == {s.key.split(".")[0] for s in CONFIG_SETTINGS if On.FLOW in s.on}


def test_train_and_the_command_default_as_the_schema_says():
    """`train()` keeps its explicit parameters (for readers and editors): their defaults are the
    schema's; the command's options default to the same, or say what leaving them out means."""
    parameters = inspect.signature(train).parameters
    for setting in SETTINGS:
        if On.TRAIN in setting.on:
            assert same(parameters[setting.name].default, setting.default), setting.name
    actions = {a.dest: a for a in train_parser()._actions}
    for setting in SETTINGS:
        if On.CLI in setting.on and setting.flag.startswith("-") and not setting.keys:
            action = actions[setting.name]
            assert action.required == setting.required, setting.name
            if not setting.required:
                assert same(action.default, setting.default if setting.type is not bool else False), setting.name
            assert setting.doc_spelt(IN_FLAGS) in action.help, setting.name


def test_the_command_groups_its_options_as_the_schema_groups_them():
    groups = {g.title: {a.dest for a in g._group_actions} for g in train_parser()._action_groups}
    assert {"vocab_size", "inputs", "out"} <= groups["required"]
    for setting in SETTINGS:
        if On.CLI in setting.on and not setting.required:
            assert set(setting.flags) <= groups[setting.group], setting.name


def test_the_flow_shows_each_setting_once_with_its_description_and_bounds():
    """What Prefect's UI renders as the run form (`run_form` adds each deployment's configuration:
    tests/pipeline/test_pipeline.py) and validates before a run starts."""
    from bpe.flows.train_bpe import train_bpe

    schema = train_bpe.parameters.model_dump()
    for setting in CONFIG_SETTINGS:
        if On.FLOW in setting.on and "." not in setting.key:  # given on its own: -p vocab_size=4096
            assert schema["properties"][setting.key]["description"] == plain(setting.doc_spelt(IN_KEYS))
    assert schema["properties"]["vocab_size"]["anyOf"][0] == {"type": "integer", "minimum": 256, "maximum": 2**32}
    assert schema["properties"]["tie_break"]["anyOf"][0]["enum"] == ["bytes", "ids"]
    assert list(schema["properties"])[:2] == ["config", "promote"] and "settings" not in schema["properties"]


def test_a_run_overrides_the_settings_it_gives():
    assert overrides({"vocab_size": 6000, "pattern": None, "min_frequency": 3}) == {
        "vocab_size": 6000,
        "min_frequency": 3,
    }
    # a section replaces the configuration's: the keys it leaves out take their defaults
    assert overrides({"superwords": {"transition": 600}}) == {"superwords": {"transition": 600}}
    # a section as the flow receives it once Prefect has checked it (its model): the keys it sets
    section = RunSettings(parity={"dev": "ntrex/", "window": 50}).parity
    assert overrides({"parity": section}) == {"parity": {"dev": "ntrex/", "window": 50}}


# The settings that decide the merges beyond the vocabulary size: the merge rules and parity's.
RULES = ("min_frequency", "tie_break", "max_token_length", "max_words", "colon_space", "superword_pattern")
PARITY = ("parity", "parity_dev", "parity_ratio", "global_merges", "parity_variant", "parity_window", "parity_alpha")
# Where a setting may be checked: the schema, and `Settings`, which checks settings against each other.
CHECKED_IN = ("bpe/schema.py", "bpe/training/settings.py")


def literal_defaults(path: Path, names: tuple[str, ...]) -> list[str]:
    """`function(name=<literal>)` for each parameter of `names` in `path` given a literal default."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            found += [
                f"{node.name}({a.arg}={d.value!r})"
                for a, d in pairs
                if a.arg in names and isinstance(d, ast.Constant) and d.value is not None
            ]
    return found


def test_no_parity_default_is_written_outside_the_schema():
    """Parity's defaults are declared once (`bpe.schema`): `train()` reads them from there
    (`DEFAULT`), the plan and the engine take them as given."""
    written = {
        str(path.relative_to(REPO)): found
        for path in (REPO / "bpe").rglob("*.py")
        if path.name != "schema.py" and (found := literal_defaults(path, PARITY))
    }
    assert written == {}


def test_train_takes_its_defaults_from_the_schema():
    for name, parameter in inspect.signature(train).parameters.items():
        if name in SETTING and parameter.default is not None:
            assert parameter.default == SETTING[name].default, name
    assert literal_defaults(REPO / "bpe" / "training" / "trainer.py", tuple(SETTING)) == []


def test_no_engine_checks_a_merge_rule_or_parity_setting_with_a_message_of_its_own():
    """A setting is refused once, where it is given, in one line naming it as the caller spells
    it: not again, worded otherwise, inside an engine."""
    names = "|".join(RULES + PARITY + ("tie_break",))
    own_check = re.compile(rf"""(?:\b(?:{names})[`'"]?: expected|expected\(\s*["'](?:{names})["'])""")
    for path in (REPO / "bpe").rglob("*.py"):
        where = str(path.relative_to(REPO))
        if where in CHECKED_IN:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and (found := own_check.search(ast.unparse(node))):
                raise AssertionError(f"{where}:{node.lineno} checks {found.group(0)!r}")


def test_train_gathers_every_setting_it_takes_by_name():
    """`train()` builds its settings from its parameters by name (no `locals()`): every setting
    it takes is in that mapping once, so a reader and a tool can follow each to the engine."""
    from bpe.training.trainer import TRAIN_SETTINGS

    source = (REPO / "bpe" / "training" / "trainer.py").read_text()
    function = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "train")
    gathered = next(
        node.value
        for node in ast.walk(function)
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["given"]
    )
    keys = [key.value for key in gathered.keys]
    assert sorted(keys) == sorted(TRAIN_SETTINGS) and all(ast.unparse(v) == k for k, v in zip(keys, gathered.values))
    assert "locals()" not in ast.unparse(function)
