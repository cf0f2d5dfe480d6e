"""Human-readable reports of a trained version: the markdown summary and the table of metrics that
the pipeline publishes as Prefect artifacts, and the line `bpe demo` ends with."""

from __future__ import annotations

import base64
import re
from urllib.parse import quote

from bpe.manifest import Manifest


def metrics_table(manifest: Manifest) -> list[dict]:
    """One row per vocabulary size: bytes per token of this version (and the previous one)."""
    evaluation = manifest.evaluation or {}
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


def text_cell(text: str) -> str:
    r"""Plain `text` inside a markdown table cell: pipes escaped, line breaks flattened.

    >>> text_cell("a|b\nc")
    'a\\|b c'
    """
    return " ".join(str(text).split()).replace("|", "\\|")


def link_target(location: str) -> str:
    """A URL for a version's location or one of its files: a URL as it is (`s3://...`), a local path
    as a `file://` URL (spaces and the like percent-encoded, so the markdown link stays one link).

    >>> link_target("/artifacts/my tok/v0001")
    'file:///artifacts/my%20tok/v0001'
    """
    if "://" in location:
        return location
    return "file://" + quote(location, safe="/:@-._~")


def data_uri(png: bytes) -> str:
    """`png` as a data: URI, which an <img> shows without fetching anything: the Prefect UI renders
    it inside a markdown artifact, where a file:// link to the plot cannot be opened."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def trend_section(manifest: Manifest) -> list[str]:
    """The markdown table of bytes per token across versions on this version's evaluation rows,
    oldest first and this version last, with the change from the row above (4 places, as the figures
    are kept, so a small regression does not print as 0.000) and the channel of a version off the
    main line (an experiment); empty when no earlier
    version was measured on the same rows."""
    evaluation = manifest.evaluation or {}
    eval_set = evaluation.get("eval_set") or {}
    trend = evaluation.get("trend") or []
    if not trend or evaluation.get("bytes_per_token") is None:
        return []
    this = {
        "version": manifest.version,
        "created": manifest.created or "",
        "vocab_size": manifest.result.vocab_size if manifest.result is not None else None,
        "bytes_per_token": evaluation["bytes_per_token"],
        "channel": manifest.channel,
    }
    lines = [
        "",
        "## Trend on the evaluation set",
        "",
        f"Bytes per token of each version on the same {eval_set.get('rows', 0):,} held-out rows (fingerprint "
        f"`{eval_set.get('fingerprint', '')[:16]}`, frozen by {eval_set.get('frozen_by', '?')}), oldest first; "
        "each at its own vocabulary size.",
        "",
        "| version | created | vocabulary | bytes per token | change |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    before = None
    for row in [*trend, this]:
        channel = row.get("channel")  # the main line's is not repeated on every row
        name = row["version"] + (f" ({text_cell(channel)})" if channel and channel != "main" else "")
        if row is this:
            name = f"**{name}** (this version)"
        value = row.get("bytes_per_token")
        change = f"{value - before:+.4f}" if value is not None and before is not None else ""
        size = f"{row['vocab_size']:,}" if row.get("vocab_size") else ""
        shown = f"{value:.4f}" if value is not None else ""  # as measured: small changes show
        lines.append(f"| {name} | {text_cell(row.get('created', ''))} | {size} | {shown} | {change} |")
        before = value if value is not None else before
    return lines


def languages_table(manifest: Manifest) -> list[dict]:
    """One row per language of the configured dev set (none without one): this version's figures
    and the promoted version's tokens per sentence on the same sentences."""
    languages = (manifest.evaluation or {}).get("languages") or {}
    if not languages:
        return []
    previous = (languages.get("previous") or {}).get("languages") or {}
    return [
        {
            "language": code,
            "tokens_per_sentence": figures["tokens_per_sentence"],
            "previous_version": (previous.get(code) or {}).get("tokens_per_sentence"),
            "bytes_per_token": figures["bytes_per_token"],
            "fertility": figures["fertility"],
            "parity": figures["parity"],
        }
        for code, figures in languages["figures"]["languages"].items()
    ]


def _figure(value: float | None, form: str) -> str:
    return "" if value is None else form.format(value)


def languages_section(manifest: Manifest, location: str, plot_png: bytes | None = None) -> list[str]:
    """The markdown of a version's per-language evaluation (empty without a dev set): a row per
    language beside the promoted version, the figures across languages, the alert when the Gini
    coefficient rose by more than the margin, the Gini across versions, and the plot."""
    languages = (manifest.evaluation or {}).get("languages") or {}
    if not languages:
        return []
    dev, figures, previous = languages["dev"], languages["figures"], languages.get("previous")
    before = languages.get("previous_version")
    pivot = f"; parity: tokens over {languages['pivot']}'s on the same sentences" if languages.get("pivot") else ""
    lines = [
        "",
        "## Languages",
        "",
        f"On the dev set `{text_cell(dev['location'])}`: {len(dev['languages'])} languages, {dev['sentences']:,} "
        f"parallel sentences each (fingerprint `{dev['fingerprint'][:16]}`){pivot}. Fertility is tokens per "
        "whitespace-separated word, for scripts written with spaces.",
        "",
        f"| language | tokens per sentence | {text_cell(before) if before else 'promoted version'} | bytes per token "
        "| fertility | parity |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in languages_table(manifest):
        lines.append(
            f"| {row['language']} | {row['tokens_per_sentence']:.1f} | {_figure(row['previous_version'], '{:.1f}')} "
            f"| {_figure(row['bytes_per_token'], '{:.3f}')} | {_figure(row['fertility'], '{:.2f}')} "
            f"| {_figure(row['parity'], '{:.2f}')} |"
        )
    across = [
        ("Gini of tokens per language", "gini", "{:.4f}"),
        (f"Rényi efficiency (alpha {languages['renyi_alpha']:g})", "renyi_efficiency", "{:.4f}"),
        ("vocabulary used", "vocabulary_use", "{:.1%}"),
        ("bytes per token, all languages", "bytes_per_token", "{:.3f}"),
    ]
    lines += [
        "",
        f"| | {manifest.version} | {text_cell(before) if before else 'promoted version'} |",
        "| --- | ---: | ---: |",
    ]
    for label, key, form in across:
        lines.append(f"| {label} | {_figure(figures[key], form)} | {_figure((previous or {}).get(key), form)} |")
    if languages.get("gini_rose") is not None:
        lines += [
            "",
            f"**Alert: the Gini coefficient rose by {languages['gini_rose']:.4f}**, more than the margin of "
            f"{languages['gini_margin']:g} (evaluation.gini_margin) above {before}'s.",
        ]
    trend = languages.get("trend") or []
    if trend:
        lines += [
            "",
            "Across versions, on the same dev set (oldest first):",
            "",
            "| version | Gini | change | bytes per token | most tokens in |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        this = {
            "version": manifest.version,
            "channel": manifest.channel,
            "gini": figures["gini"],
            "bytes_per_token": figures["bytes_per_token"],
            "most_tokens": figures["most_tokens"],
        }
        last = None
        for row in [*trend, this]:
            channel = row.get("channel")
            name = row["version"] + (f" ({text_cell(channel)})" if channel and channel != "main" else "")
            name = f"**{name}** (this version)" if row is this else name
            gini = row.get("gini")
            change = f"{gini - last:+.4f}" if gini is not None and last is not None else ""
            lines.append(
                f"| {name} | {_figure(gini, '{:.4f}')} | {change} | {_figure(row.get('bytes_per_token'), '{:.3f}')} "
                f"| {row.get('most_tokens') or ''} |"
            )
            last = gini if gini is not None else last
    if languages.get("plot"):
        plot = f"{location.rstrip('/')}/{languages['plot']}"
        lines.append("")
        if plot_png:
            lines += [
                f"![tokens per sentence by language, and the Gini coefficient across versions]({data_uri(plot_png)})",
                "",
            ]
        lines.append(f"Plot file: [{plot}]({link_target(plot)})")
    return lines


def summary_markdown(
    manifest: Manifest, location: str, plot_png: bytes | None = None, languages_png: bytes | None = None
) -> str:
    """The markdown summary of a version: data, settings, timing, compression on the evaluation set
    and its trend across versions, with a link to the version and, given `plot_png`, the plot
    embedded as a data: URI (a link to the file otherwise); with a dev set by language, the figures
    per language (`languages_section`, its plot `languages_png`)."""
    s, c, r, data = manifest.settings, manifest.counts, manifest.result, manifest.data
    evaluation = manifest.evaluation or {}
    eval_set = evaluation.get("eval_set") or {}
    own = evaluation.get("run_held_out") or {}
    lines = [
        f"# {manifest.name} {manifest.version}",
        "",
        f"Written to [`{location}`]({link_target(location)}) at {manifest.created}.",
        "",
        "| | |",
        "| --- | --- |",
        f"| data | {len(data.shards)} shard(s), {c.bytes / 1e6:,.1f} MB, {c.documents:,} rows "
        f"({c.held_out_rows:,} held out), fingerprint `{data.fingerprint[:16]}` |",
        f"| counted | {data.counted_shards or 0} shard(s) counted, {data.cached_shards or 0} from the cache |",
        f"| settings | vocabulary {s.vocab_size:,}, pattern {code_cell(s.pattern)}, special tokens "
        f"{', '.join(code_cell(t) for t in s.special_tokens) or 'none'}, min frequency {s.min_frequency}"
        f"{superword_note(manifest)} |",
        f"| result | {r.merges:,} merges, vocabulary {r.vocab_size:,}; stopped: {r.stop_reason} |",
        "| time | " + ", ".join(f"{k} {v:.1f} s" for k, v in manifest.seconds.to_json().items()) + " |",
    ]
    if evaluation and evaluation.get("bytes_per_token") is None:  # holdout_fraction 0, or no usable set
        lines.append("| compression | no held-out rows to evaluate on |")
    elif evaluation:
        before = evaluation.get("previous_bytes_per_token")
        previous, size = evaluation["previous_version"], manifest.result.vocab_size
        compared = f" (previous version {previous} at {size:,} tokens: {before:.3f})" if before else ""
        if eval_set:
            where = (
                f"the evaluation set: {evaluation['rows']:,} held-out rows, {evaluation.get('bytes', 0):,} bytes, "
                f"fingerprint `{eval_set['fingerprint'][:16]}`, frozen by {eval_set['frozen_by']}"
            )
        else:  # a manifest from before the evaluation set
            where = f"{evaluation['rows']:,} held-out rows"
        lines.append(f"| compression | {evaluation['bytes_per_token']:.3f} bytes per token on {where}{compared} |")
    if own.get("bytes_per_token") is not None and own.get("fingerprint") != eval_set.get("fingerprint"):
        lines.append(
            f"| this run's held-out rows | {own['bytes_per_token']:.3f} bytes per token on this run's own "
            f"{own['rows']:,} held-out rows (its own data: not comparable across versions) |"
        )
    lines += [f"| note | {text_cell(note)} |" for note in evaluation.get("notes") or []]
    if evaluation.get("bytes_per_token") is not None:
        lines += trend_section(manifest)
        lines += [
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
            plot = f"{location.rstrip('/')}/{evaluation['plot']}"
            lines.append("")
            if plot_png:
                lines += [f"![bytes per token by vocabulary size, and across versions]({data_uri(plot_png)})", ""]
            lines.append(f"Plot file: [{plot}]({link_target(plot)})")
    lines += languages_section(manifest, location, languages_png)
    return "\n".join(lines) + "\n"


def superword_note(manifest: Manifest) -> str:
    """What a superword tokenizer's settings add to its report (", superwords from 24,576 (split
    superbpe, at most 4 words)"); nothing for any other."""
    s = manifest.settings
    if s is None or not s.superwords:
        return ""
    words = f"at most {s.max_words} words" if s.max_words else "any number of words"
    return f", superwords from {s.transition:,} (split {s.superword_pattern}, {words})"


def one_line(manifest: Manifest, location: str) -> str:
    """The line a run ends with: where the version is, and its bytes per token on held-out text."""
    evaluation = manifest.evaluation or {}
    bpt = evaluation.get("bytes_per_token")
    eval_set = evaluation.get("eval_set") or {}
    on = f" (evaluation set `{eval_set['fingerprint'][:16]}`, {evaluation['rows']:,} rows)" if eval_set else ""
    compression = f"{bpt:.3f} bytes per token on held-out text{on}" if bpt else "no held-out text to evaluate on"
    return f"{manifest.name} {manifest.version} written to {location}: {compression}{superword_note(manifest)}"
