"""Evaluation: bytes per token on held-out text, at the trained size and every smaller size.

BPE merges form a prefix sequence, so the first k merges of a training are exactly what training
to 256 + k tokens would have given: one training yields the whole compression curve.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bpe.tokenizer import Tokenizer


def default_sizes(vocab_size: int) -> list[int]:
    """512, 1024, 2048, ... below the trained size, and the trained size itself."""
    sizes = []
    size = 512
    while size < vocab_size:
        sizes.append(size)
        size *= 2
    return sizes + [vocab_size]


def truncated(tokenizer: Tokenizer, vocab_size: int) -> Tokenizer:
    """The tokenizer with only its first merges, `vocab_size` tokens in all (special tokens kept)."""
    n_merges = max(0, min(len(tokenizer.merges), vocab_size - 256 - len(tokenizer.special_tokens)))
    return Tokenizer(tokenizer.merges[:n_merges], tokenizer.pattern, list(tokenizer.special_tokens))


def bytes_per_token(tokenizer: Tokenizer, texts: Sequence[str]) -> float | None:
    total_bytes = sum(len(t.encode("utf-8")) for t in texts)
    total_tokens = sum(len(tokenizer.encode_ordinary(t)) for t in texts)
    return round(total_bytes / total_tokens, 4) if total_tokens else None


def compression_curve(tokenizer: Tokenizer, texts: Sequence[str], sizes: Sequence[int]) -> list[dict]:
    """[{"vocab_size", "bytes_per_token"}] for each size the tokenizer reaches."""
    rows = []
    for size in sorted(set(sizes)):
        if size > tokenizer.vocab_size:
            continue
        rows.append({"vocab_size": size, "bytes_per_token": bytes_per_token(truncated(tokenizer, size), texts)})
    return rows


def plot_curve(
    path: Path, curve: list[dict], title: str, previous: list[dict] | None = None, label: str = "",
    previous_label: str = "previous version",
) -> Path:  # fmt: skip
    """A PNG of bytes per token against vocabulary size (log scale), with the previous version's
    curve when there is one, so a size can be picked by looking."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    if previous:
        ax.plot([r["vocab_size"] for r in previous], [r["bytes_per_token"] for r in previous], "o--",
                color="#999999", label=previous_label)  # fmt: skip
    ax.plot([r["vocab_size"] for r in curve], [r["bytes_per_token"] for r in curve], "o-", color="#1f77b4",
            label=label or "this version")  # fmt: skip
    for r in curve:
        ax.annotate(f"{r['bytes_per_token']:.2f}", (r["vocab_size"], r["bytes_per_token"]),
                    textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)  # fmt: skip
    ax.set_xscale("log", base=2)
    ticks = sorted({r["vocab_size"] for r in curve + (previous or [])})
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("vocabulary size (tokens)")
    ax.set_ylabel("bytes per token on held-out text (higher is better)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
