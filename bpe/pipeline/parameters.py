"""The train-bpe flow's parameters, made from the schema (`bpe.schema`, `bpe.pipeline.config`), and
the run form each deployment shows.

Each setting a run may give (the configuration keys the schema marks `On.FLOW`) is a parameter of
its own name, typed and bounded as the setting is, None when not given (`prefect deployment run
'train-bpe/en' -p vocab_size=4096`): `with_settings` adds them to the flow's signature from
`RunSettings`, a pydantic model of those settings, each with its description. A setting left out
is the configuration's (the file as the run finds it, with its BPE_* variables).

Prefect's UI shows a deployment's parameter schema as the form of a custom run. `run_form` makes
it from the flow's for one configuration: each setting once, of its own type (not "or null":
leaving a field empty is what keeps the configuration's value), the configuration's value as
deployed shown as the field's placeholder and in its description, never as a default (the form
would send it, and a run would keep a value the configuration no longer has: an experiment, or an
old `artifact_root`); and descriptions that the UI's markdown shows as written.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from bpe.engine.errors import SHOWN_CHARS
from bpe.pipeline.config import CONFIG_SETTINGS, IN_KEYS, SECTION_REQUIRES, SECTIONS
from bpe.schema import Choice, On, Setting

if TYPE_CHECKING:
    from bpe.pipeline.config import TokenizerConfig


def plain(text: str) -> str:
    """A description without `<` or `>`, which Prefect's UI reads as markup and drops with what is
    between them: `<name>` becomes NAME, `<=` and `>=` become ≤ and ≥, any other an entity.

    >>> plain("its deployment is train-bpe/<name>, under <artifact root>/.cache, 0 <= A <= 1")
    'its deployment is train-bpe/NAME, under ARTIFACT_ROOT/.cache, 0 ≤ A ≤ 1'
    """
    text = re.sub(r"<([\w ]+)>", lambda m: m.group(1).upper().replace(" ", "_"), text)
    return text.replace("<=", "≤").replace(">=", "≥").replace("<", "&lt;").replace(">", "&gt;")


def _annotation(setting: Setting) -> Any:
    """The field's type, with the schema's choices and bounds (what a form can check)."""
    kind = Literal[setting.check.options] if isinstance(setting.check, Choice) else setting.type
    return Annotated[kind, Field(**setting.check.constraints())]


def _field(setting: Setting, default: Any) -> tuple[Any, Any]:
    described = Field(default=default, title=setting.key, description=plain(setting.doc_spelt(IN_KEYS)))
    optional = default is None or setting.optional
    return (_annotation(setting) | None if optional else _annotation(setting)), described


def _section_model(section: str) -> type[BaseModel]:
    """A section of the configuration (`superwords`) as its own model: its keys and defaults."""
    fields = {}
    for setting in SECTIONS[section]:
        name = setting.key.split(".", 1)[1]
        default = ... if setting.key in SECTION_REQUIRES else setting.default
        fields[name] = _field(setting, default)
    doc = f"The `{section}:` section of a configuration."
    return create_model(section.capitalize(), __config__=ConfigDict(extra="forbid"), __doc__=doc, **fields)


def _run_settings() -> type[BaseModel]:
    fields = {}
    for setting in CONFIG_SETTINGS:
        if On.FLOW not in setting.on or "." in setting.key:
            continue
        if setting.key in SECTIONS:  # a section's switch: the section, or unset
            model = _section_model(setting.key)
            doc = plain(setting.doc_spelt(IN_KEYS))
            fields[setting.key] = (model | None, Field(default=None, title=setting.key, description=doc))
        else:
            fields[setting.key] = _field(setting, None)
    return create_model(
        "RunSettings",
        __config__=ConfigDict(extra="forbid"),
        __doc__="The settings a run of train-bpe may give: each one left unset is the configuration's.",
        **fields,
    )


RunSettings = _run_settings()


def overrides(given: dict[str, Any]) -> dict[str, Any]:
    """The configuration keys a run overrides: the settings it was given (None: not given), as
    `load_config(path, overrides)` takes them; a section (`parity`, `superwords`) arrives as its
    model once Prefect has checked it, and is given as the keys it sets."""
    given = {k: v.model_dump(exclude_unset=True) if isinstance(v, BaseModel) else v for k, v in given.items()}
    return {key: value for key, value in given.items() if value is not None}


def with_settings(fn: Callable) -> Callable:
    """Add to a flow function (`def f(..., **given)`) a keyword parameter per field of RunSettings,
    typed and bounded as the field is, None when not given, described (in the docstring, where
    Prefect reads it) as the field is."""
    signature = inspect.signature(fn, eval_str=True)  # Prefect reads the types: not as strings
    kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    added, docs = [], []
    for name, info in RunSettings.model_fields.items():
        annotation = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
        added.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
        docs.append(f"        {name}: {info.description}")
    fn.__signature__ = signature.replace(parameters=[*kept, *added])
    fn.__doc__ = (fn.__doc__ or "").rstrip() + "\n" + "\n".join(docs) + "\n"
    return fn


def run_form(schema: dict, cfg: TokenizerConfig, where: str) -> dict:
    """The parameter schema of the deployment of `cfg` (its configuration file named `where`), from
    the flow's (`schema`): each setting typed as it is, without a default, its configuration's value
    as deployed as its placeholder (`examples`) and at the end of its description. A section
    (`superwords`) is written out in place, its own keys without a default either (theirs in their
    descriptions), so that the form fills in nothing a run did not ask for."""
    form = copy.deepcopy(schema)
    sections = form.get("definitions", {})
    for model in sections.values():
        for prop in model.get("properties", {}).values():
            if "default" in prop:
                default = prop.pop("default")
                if default is not None:
                    prop["examples"] = [default]
                prop["description"] = f"{prop.get('description', '')}; by default {_shown(default)}."
    for key, prop in form.get("properties", {}).items():
        if key not in RunSettings.model_fields:
            continue
        _of_its_type(prop)
        if "$ref" in prop:  # the section itself, where the UI would show its model's description instead
            prop.update({**sections[prop.pop("$ref").rsplit("/", 1)[-1]], **prop})
        prop.pop("default", None)
        value = getattr(cfg, key)
        value = asdict(value) if is_dataclass(value) else value
        if value not in (None, [], {}):
            prop["examples"] = [value]
        prop["description"] = (
            f"{prop.get('description', '')}. {_markdown(where)} as deployed: {_shown(value)}; left empty, a run "
            "takes the configuration's value."
        )
    return form


def _of_its_type(prop: dict) -> None:
    """A property's type without its "or null" branch (merged into the property when one is left)."""
    kinds = [kind for kind in prop.get("anyOf", []) if kind.get("type") != "null"]
    if "anyOf" not in prop:
        return
    del prop["anyOf"]
    if len(kinds) == 1:
        prop.update(kinds[0])
    else:
        prop["anyOf"] = kinds


def _shown(value: Any) -> str:
    """A value in a description: as JSON (a string as it is), cut to its start, as markdown shows it."""
    text = value if isinstance(value, str) else json.dumps(value)
    return _markdown(text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "...")


def _markdown(text: str) -> str:
    """`text` as the UI's markdown shows it as written: `<`, `>` and `&` as entities (no markup to
    drop), and the characters that make emphasis, code or links escaped (a pattern's `*`).

    >>> _markdown("<|endoftext|> *x* a_b.yaml")
    '&lt;|endoftext|&gt; \\\\*x\\\\* a\\\\_b.yaml'
    """
    entities = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
    return "".join(entities.get(c) or (f"\\{c}" if c in "\\`*_[]" else c) for c in text)
