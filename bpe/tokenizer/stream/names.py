"""How `encode_inputs`' errors name its options: as its parameters (`format`, `force=True`) for a
Python caller, or as the caller spells them (the `bpe encode` command: `--format`, `--force`).

>>> Names()("offsets"), Names().on("force"), Names({"force": "--force"}).on("force")
('offsets', 'force=True', '--force')
"""

from __future__ import annotations

from collections.abc import Mapping


class Names:
    """`names("out")`: how the caller names a parameter; `names.on("force")`: how it turns a
    switch on. `spelled` maps parameter -> the caller's name (None: the parameters' own names)."""

    def __init__(self, spelled: Mapping[str, str] | None = None) -> None:
        self.spelled = spelled

    def __call__(self, parameter: str) -> str:
        return parameter if self.spelled is None else self.spelled.get(parameter, parameter)

    def on(self, parameter: str) -> str:
        return f"{parameter}=True" if self.spelled is None else self(parameter)
