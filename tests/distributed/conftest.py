"""Helpers the Dask engine's tests share: a run on the cluster with a fault injected part-way
through its merges."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bpe import Tokenizer

VOCAB = 900  # merges enough for a fault to strike mid-run


def at_merge(fraction: float, action: Callable[[], object]) -> Callable[[str, int, int], None]:
    """A progress callback that runs `action` once, when `fraction` of the merges are done."""
    done_once: list[bool] = []

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "merge" and done >= total * fraction and not done_once:
            done_once.append(True)
            action()

    progress.fired = done_once
    return progress


def train_on(client, texts: list[str], progress, log: list[str], **options) -> Tokenizer:
    """`texts` trained to VOCAB tokens (cl100k) on the Dask engine of `client`, `log` collecting its lines."""
    from bpe import train

    return train(
        texts,
        vocab_size=VOCAB,
        pattern="cl100k",
        engine="dask",
        client=client,
        progress=progress,
        log=log.append,
        call_timeout=20,
        **options,
    )


def train_args(data: object, scheduler: str, out: object) -> list[str]:
    """`bpe train`'s arguments for a small run of `data` on the Dask cluster at `scheduler`."""
    return ["train", str(data), "--vocab-size", "300", "--engine", "dask", "--scheduler", scheduler, "--out", str(out)]
