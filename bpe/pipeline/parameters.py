"""The train-bpe flow's parameters, made from the schema (`bpe.schema`, `bpe.pipeline.config`).

`RunSettings` is the settings a run may give, as one typed parameter: a pydantic model whose
fields are the configuration keys the schema marks `On.FLOW`, each with its description and
bounds, and each left unset taking the configuration's value. Prefect shows it as a form in its UI
and validates it before a run starts. A single setting can also be given on its own, as a
parameter of its own name (`prefect deployment run 'train-bpe/en' -p vocab_size=4096`): those are
added to the flow's signature from the same model (`with_single_settings`), and win over the same
field of `settings`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from bpe.pipeline.config import CONFIG_SETTINGS, IN_KEYS, SECTION_REQUIRES, SECTIONS
from bpe.schema import Choice, On, Setting


def _annotation(setting: Setting) -> Any:
    """The field's type, with the schema's choices and bounds (what a form can check)."""
    kind = Literal[setting.check.options] if isinstance(setting.check, Choice) else setting.type
    return Annotated[kind, Field(**setting.check.constraints())]


def _field(setting: Setting, default: Any) -> tuple[Any, Any]:
    described = Field(default=default, title=setting.key, description=setting.doc_spelt(IN_KEYS))
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
            doc = setting.doc_spelt(IN_KEYS)
            fields[setting.key] = (model | None, Field(default=None, title=setting.key, description=doc))
        else:
            fields[setting.key] = _field(setting, None)
    return create_model(
        "RunSettings",
        __config__=ConfigDict(extra="forbid"),
        __doc__="The settings of a run of train-bpe: each one left unset is the configuration's.",
        **fields,
    )


RunSettings = _run_settings()


def overrides(settings: BaseModel | dict | None, single: dict[str, Any]) -> dict[str, Any]:
    """The configuration keys a run overrides: the fields of `settings` it sets, then the single
    settings it was given (None: not given), as `load_config(path, overrides)` takes them."""
    if isinstance(settings, dict):
        settings = RunSettings(**settings)
    given = settings.model_dump(exclude_unset=True) if settings is not None else {}
    given = {key: value for key, value in given.items() if value is not None}
    # a section given on its own (`parity`, `superwords`) arrives as its model once Prefect has checked it
    single = {k: v.model_dump(exclude_unset=True) if isinstance(v, BaseModel) else v for k, v in single.items()}
    return {**given, **{key: value for key, value in single.items() if value is not None}}


def with_single_settings(fn: Callable) -> Callable:
    """Add to a flow function (`def f(..., **single)`) a keyword parameter per field of
    RunSettings, typed and bounded as the field is, None when not given; its description (in the
    docstring, where Prefect reads it) points at the field."""
    signature = inspect.signature(fn, eval_str=True)  # Prefect reads the types: not as strings
    kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    added, docs = [], []
    for name, info in RunSettings.model_fields.items():
        annotation = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
        added.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
        docs.append(f"        {name}: the same as settings.{name}, given on its own (`-p {name}=...`)")
    fn.__signature__ = signature.replace(parameters=[*kept, *added])
    fn.__doc__ = (fn.__doc__ or "").rstrip() + "\n" + "\n".join(docs) + "\n"
    return fn
