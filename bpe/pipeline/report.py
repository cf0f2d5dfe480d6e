"""Human-readable reports of a trained version: the markdown summary and the table of metrics that
the pipeline publishes as Prefect artifacts, and the line `bpe demo` ends with."""

from __future__ import annotations

import re


def metrics_table(manifest: dict) -> list[dict]:
    """One row per vocabulary size: bytes per token of this version (and the previous one)."""
    evaluation = manifest.get("evaluation") or {}
    previous = {r["vocab_size"]: r["bytes_per_token"] for r in evaluation.get("previous_curve") or []}
    return [
        {
            "vocab_size": row["vocab_size"],
            "bytes_per_token": row["bytes_per_token"],
            "previous_version": previous.get(row["vocab_size"]),
        }
        for row in evaluation.get("curve") or []
    ]


def code_cell(text: str) -> str:
    r"""`text` as inline code inside a markdown table cell: fenced with more backticks than it holds,
    and its pipes escaped, which GitHub-flavoured tables require even inside code.

    >>> code_cell("<|endoftext|>")
    '`<\\|endoftext\\|>`'
    >>> code_cell("a`b")
    '``a`b``'
    """
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {text} " if text.startswith("`") or text.endswith("`") else text
    return f"{fence}{padded}{fence}".replace("|", "\\|")


def summary_markdown(manifest: dict, location: str) -> str:
    """The markdown summary of a version: data, settings, timing and compression."""
    s, c, r = manifest["settings"], manifest["counts"], manifest["result"]
    seconds, data = manifest["seconds"], manifest["data"]
    evaluation = manifest.get("evaluation") or {}
    lines = [
        f"# {manifest['name']} {manifest['version']}",
        "",
        f"Written to `{location}` at {manifest['created']}.",
        "",
        "| | |",
        "| --- | --- |",
        f"| data | {len(data['shards'])} shard(s), {c['bytes'] / 1e6:,.1f} MB, {c['documents']:,} rows "
        f"({c['held_out_rows']:,} held out), fingerprint `{data['fingerprint'][:16]}` |",
        f"| counted | {data.get('counted_shards', 0)} shard(s) counted, "
        f"{data.get('cached_shards', 0)} from the cache |",
        f"| settings | vocabulary {s['vocab_size']:,}, pattern {code_cell(s['pattern'])}, special tokens "
        f"{', '.join(code_cell(t) for t in s['special_tokens']) or 'none'}, min frequency {s['min_frequency']} |",
        f"| result | {r['merges']:,} merges, vocabulary {r['vocab_size']:,}; stopped: {r['stop_reason']} |",
        "| time | " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()) + " |",
    ]
    if evaluation and evaluation.get("bytes_per_token") is None:  # holdout_fraction 0: nothing held out
        lines.append("| compression | no held-out rows to evaluate on |")
    elif evaluation:
        before = evaluation.get("previous_bytes_per_token")
        compared = f" (previous version {evaluation['previous_version']}: {before:.3f})" if before else ""
        lines += [
            f"| compression | {evaluation['bytes_per_token']:.3f} bytes per token on {evaluation['rows']:,} "
            f"held-out rows{compared} |",
            "",
            "## Compression by vocabulary size",
            "",
            "| vocabulary | bytes per token | previous version |",
            "| ---: | ---: | ---: |",
        ]
        for row in metrics_table(manifest):
            prev = f"{row['previous_version']:.3f}" if row["previous_version"] else ""
            lines.append(f"| {row['vocab_size']:,} | {row['bytes_per_token']:.3f} | {prev} |")
        if evaluation.get("plot"):
            plot = f"{location}/{evaluation['plot']}"
            lines += ["", f"Plot: [{plot}]({plot if '://' in plot else 'file://' + plot})"]
    return "\n".join(lines) + "\n"


def one_line(manifest: dict, location: str) -> str:
    evaluation = manifest.get("evaluation") or {}
    bpt = evaluation.get("bytes_per_token")
    compression = f"{bpt:.3f} bytes per token on held-out text" if bpt else "no held-out text to evaluate on"
    return f"{manifest['name']} {manifest['version']} written to {location}: {compression}"
