"""The roles of special tokens: which one begins a sequence (bos), ends it (eos), pads a batch
(pad) or stands for an unknown token (unk), as transformers names them. A tokenizer records them
in its manifest and in tokenizer_config.json; `train` adds a role's token that is not among the
special tokens.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from bpe.errors import SettingsError
from bpe.formats.spelling import bytes_to_unicode
from bpe.schema import ROLES


def check_roles(roles: Mapping[str, str] | None, special_tokens: Collection[str]) -> dict[str, str]:
    """`roles` as role -> token in the order bos, eos, pad, unk, each token one of `special_tokens`.
    Keys may be spelled as transformers does (`eos_token`); anything else raises SettingsError."""
    roles = normalize_roles(roles)
    for role, token in roles.items():
        if token not in special_tokens:
            known = ", ".join(map(repr, special_tokens)) or "none"
            raise SettingsError(
                lambda s, role=role, token=token, known=known: (
                    f"{s(role + '_token')}: {token!r} is not a special "
                    f"token of this tokenizer (its special tokens: {known})"
                ),
                parameter=f"{role}_token",
            )
    return roles


def normalize_roles(roles: Mapping[str, str] | None) -> dict[str, str]:
    """`{"eos_token": "</s>"}` or `{"eos": "</s>"}` -> `{"eos": "</s>"}`, in the order bos, eos,
    pad, unk; an unknown role or a token that is not a non-empty string raises SettingsError.

    >>> normalize_roles({"pad_token": "<|pad|>", "eos": "<|endoftext|>"})
    {'eos': '<|endoftext|>', 'pad': '<|pad|>'}
    """
    if roles is None:
        return {}
    if not isinstance(roles, Mapping):
        raise SettingsError(
            lambda s: f"{s.special_token_roles}: expected a mapping of role -> token, got {type(roles).__name__}",
            parameter="special_token_roles",
        )
    found: dict[str, str] = {}
    for key, token in roles.items():
        role = key.removesuffix("_token") if isinstance(key, str) else key
        if role not in ROLES:
            raise SettingsError(
                lambda s, key=key: f"{s.special_token_roles}: unknown role {key!r} (expected {', '.join(ROLES)})",
                parameter="special_token_roles",
            )
        if role in found:
            raise SettingsError(
                lambda s, role=role: f"{s.special_token_roles}: the {role} role is given twice",
                parameter="special_token_roles",
            )
        if not isinstance(token, str) or not token:
            raise SettingsError(
                lambda s, role=role, token=token: f"{s(role + '_token')}: expected a non-empty token, got {token!r}",
                parameter=f"{role}_token",
            )
        if token in bytes_to_unicode().values():
            raise SettingsError(
                lambda s, role=role, token=token: (
                    f"{s(role + '_token')}: {token!r} is spelled like a byte token in "
                    "vocab.json; choose a longer one, such as <|pad|>"
                ),
                parameter=f"{role}_token",
            )
        found[role] = token
    return {role: found[role] for role in ROLES if role in found}


def with_role_tokens(special_tokens: Sequence[str], roles: Mapping[str, str] | None) -> list[str]:
    """The special tokens to train with: `special_tokens`, then each role's token that is not among
    them, in the order bos, eos, pad, unk (as transformers' `add_special_tokens` adds a pad token).

    >>> with_role_tokens(["<|endoftext|>"], {"eos": "<|endoftext|>", "pad": "<|pad|>"})
    ['<|endoftext|>', '<|pad|>']
    """
    tokens = list(special_tokens)
    for token in normalize_roles(roles).values():
        if token not in tokens:
            tokens.append(token)
    return tokens
