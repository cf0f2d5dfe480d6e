"""`bpe train`: the training options, the run, `--also-save`, and the summary printed after it."""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from pathlib import Path

from bpe.cli.flags import IN_FLAGS
from bpe.errors import require_extra
from bpe.manifest import Manifest
from bpe.schema import GROUPS, Choice, On, Setting, grouped, on


def add_training_options(p: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """`bpe train`'s settings, made from the schema (`bpe.schema`): the required ones in a group of
    their own, then a group per schema group, each option with the schema's doc as its help and
    the default it takes. Returns the groups by name (and "required"), for the other options."""
    groups = {"required": p.add_argument_group("required")}
    for group, settings in grouped(on(On.CLI)).items():
        groups[group] = p.add_argument_group(group, GROUPS[group])
        for setting in settings:
            add_setting_option(groups["required"] if setting.required else groups[group], setting)
    return groups


def add_setting_option(group: argparse._ArgumentGroup, setting: Setting) -> None:
    """The option (or options, one per key of a mapping) of one setting."""
    doc = setting.doc_spelt(IN_FLAGS)
    if setting.keys:
        for key, flag in zip(setting.keys, setting.flags.values(), strict=True):
            group.add_argument(flag, metavar=setting.metavar, help=setting.doc_spelt(IN_FLAGS, key))
        return
    if not setting.flag.startswith("-"):  # the inputs (or --lang: text by language)
        help = f"{doc}; - reads stdin (once); or give text by language with {IN_FLAGS.languages}"
        group.add_argument(setting.flag, nargs="*", metavar="INPUT", help=help)
        return
    options: dict = {"dest": setting.name, "help": doc + _default_note(setting)}
    if setting.type is bool:
        group.add_argument(setting.flag, action="store_true", **options)
        return
    if isinstance(setting.check, Choice):
        options["choices"] = setting.check.options
    elif setting.type in (int, float):
        options["type"] = setting.type
    if setting.type == list[str]:
        default = list(setting.default) if setting.default is not None else None
        options.update(action="append", default=default, help=doc + " (repeat the flag for several)")
    elif setting.type == dict[str, list[str]]:  # --lang eng=data/en/, a flag per language
        options.update(action="append", default=setting.default, help=doc + " (repeat the flag for each language)")
    elif setting.required:
        options["required"] = True
    else:
        options["default"] = setting.default
    group.add_argument(setting.flag, metavar=setting.metavar, **options)


def _default_note(setting: Setting) -> str:
    """What the option's help says of its default: `(default: 4; 0: no limit)`."""
    if setting.required or setting.type is bool:
        return ""
    if setting.default is None:
        return f" (default: {setting.none})"
    unset = f"; {setting.cli_none}: {setting.none}" if setting.cli_none is not None else ""
    return f" (default: {setting.default}{unset})"


def given_settings(args: argparse.Namespace) -> dict:
    """The settings `bpe train` was given, as `train()` takes them (every one of the schema's
    options: each not given holds its default)."""
    values = {}
    for setting in on(On.CLI):
        if setting.keys:
            found = {key: getattr(args, dest) for key, dest in zip(setting.keys, setting.flags, strict=True)}
            values[setting.name] = {key: token for key, token in found.items() if token is not None}
            continue
        value = getattr(args, setting.name if setting.flag.startswith("-") else setting.flag)
        if setting.cli_none is not None and str(value) == setting.cli_none:
            value = None
        if setting.type == dict[str, list[str]] and value is not None:
            from bpe.languages.codes import parse_languages

            value = parse_languages(value, setting.name)
        values[setting.name] = value
    return values


def run_train(args: argparse.Namespace) -> int:
    from bpe.engine.compilation import CompileWatch
    from bpe.errors import SettingsError, StoppedEarly
    from bpe.progress import Bars
    from bpe.training.long_tokens import LongTokensWarning, long_tokens
    from bpe.training.trainer import train

    if args.also_save is not None:
        also_save_path(args.out, 0)  # an --out with no place beside it: refused before anything is read
    _check_out(args.out, args.force)
    given = given_settings(args)
    roles = given["special_token_roles"]
    base = None
    if args.base is not None:
        from bpe.cli.encode import not_applied_said
        from bpe.training.extend import load_base

        with not_applied_said():
            base = load_base(args.base, args.pattern)  # a bad base fails here, before any input is read
    also_save = also_save_sizes(
        args.also_save, args.vocab_size, args.special_tokens, roles, base.tokenizer.vocab_size if base else 0
    )
    for size in also_save:
        _check_out(also_save_path(args.out, size), args.force)
    inputs, languages, lang_dir = given.pop("files"), given.pop("languages"), given.pop("lang_dir")
    counts = given.pop("counts")
    if inputs and languages:
        raise SettingsError(
            f"{IN_FLAGS.languages}: give the text by language or as INPUT, not both (got INPUT {inputs[0]})",
            parameter="languages",
        )
    if lang_dir is not None and (inputs or languages):
        other = f"INPUT {inputs[0]}" if inputs else IN_FLAGS.languages
        raise SettingsError(
            f"{IN_FLAGS.lang_dir}: gives the text by language; give it, {IN_FLAGS.languages} or INPUT, one of "
            f"them (got {other})",
            parameter="lang_dir",
        )
    if counts is not None and (inputs or languages or lang_dir is not None):
        other = f"INPUT {inputs[0]}" if inputs else IN_FLAGS.languages if languages else IN_FLAGS.lang_dir
        raise SettingsError(
            f"{IN_FLAGS.counts}: trains on word counts, which hold no text; leave out {other}", parameter="counts"
        )
    if not inputs and not languages and lang_dir is None and counts is None:
        raise SettingsError(
            f"give INPUT (files, directories, globs, URLs or -), {IN_FLAGS.languages} CODE=INPUT, "
            f"{IN_FLAGS.lang_dir} DIR or {IN_FLAGS.counts} DIR"
        )
    progress = None if args.quiet or args.json else Bars()  # bars on a terminal only
    engine_options = {}
    if args.engine == "dask":
        require_extra("dask", "--engine dask")
        if progress is not None:
            engine_options["log"] = lambda line: print(line, file=sys.stderr)
    started = time.perf_counter()
    notice = CompileWatch(on_start=lambda: _say_compiling(progress))
    try:
        with notice, warnings.catch_warnings():
            warnings.simplefilter("ignore", StoppedEarly)  # the summary says it, spelled with flags
            warnings.simplefilter("ignore", LongTokensWarning)  # said below, spelt as a flag
            warnings.showwarning = _said  # what finding the inputs skipped: one line, before the bars
            tokenizer = train(
                files=languages or inputs or None,
                lang_dir=lang_dir,
                counts=counts,
                **{**given, "base": base},
                progress=progress,
                **engine_options,
            )
    finally:
        if progress is not None:
            progress.finish()  # ends the bar's line, so that a message after it starts a line of its own
    made = long_tokens(tokenizer.vocab[256 + tokenizer.manifest.settings.base_merges :])
    if made is not None:  # before saving, which such tokens make long
        print(f"bpe: warning: {made.message(IN_FLAGS.max_token_length)}", file=sys.stderr, flush=True)
    tokenizer.save(args.out, force=args.force)
    saved, not_reached = save_truncations(tokenizer, args.out, also_save, args.force)
    record = summary_record(tokenizer.manifest, args.out, total_seconds=time.perf_counter() - started)
    record["also_saved"] = [{"out": out, "vocab_size": size} for out, size in saved]
    record["warnings"] += [
        f"--also-save {size}: the run stopped at {tokenizer.vocab_size:,} tokens; not written" for size in not_reached
    ]
    if args.json and made is not None:
        record["warnings"].append(made.message(IN_FLAGS.max_token_length))
    if args.json:
        import json

        print(json.dumps(record))
    elif args.quiet:  # no summary; what the user must know still shows
        for warning in record["warnings"]:
            print(f"bpe: warning: {warning}", file=sys.stderr)
    else:
        print(summary(tokenizer.manifest, args.out, record))
    return 0


def _said(message: Warning | str, *where: object) -> None:
    """A warning of `train()`'s (inputs it skipped) as one line of the command's."""
    print(f"bpe: {message}", file=sys.stderr, flush=True)


def also_save_sizes(
    text: str | None, vocab_size: int, special_tokens: list[str], roles: dict[str, str], base_size: int = 0
) -> list[int]:
    """`--also-save 8192,16384` as sizes, largest first, each checked before training: below
    --vocab-size, and at least the 256 bytes plus the special tokens (the role tokens included),
    or the --from tokenizer's size (`base_size`).

    >>> also_save_sizes("300, 280,300", 400, ["<|endoftext|>"], {})
    [300, 280]
    """
    from bpe.errors import SettingsError
    from bpe.formats.roles import with_role_tokens

    if text is None:
        return []
    smallest = max(256 + len(with_role_tokens(special_tokens, roles)), base_size)
    least = "the --from tokenizer's size" if base_size >= smallest else "256 bytes + special tokens"
    sizes = []
    for part in text.split(","):
        # ASCII digits only: "²" and "٣" are digits to str.isdigit, and int() refuses the first
        size = int(part) if re.fullmatch(r"\s*[0-9]+\s*", part) else None
        if size is None or not smallest <= size < vocab_size:
            raise SettingsError(
                f"--also-save: expected vocabulary sizes from {smallest} ({least}) "
                f"to below --vocab-size {vocab_size}, separated by commas, got {part.strip()!r}",
                parameter="also_save",
            )
        sizes.append(size)
    return sorted(set(sizes), reverse=True)


def also_save_path(out: str, size: int) -> str:
    """Where `--also-save` writes the tokenizer of `size` tokens: beside --out, in its directory or
    bucket, as `<out>-<size>` (`tok/` -> `tok-8192`, `s3://bucket/tok/` -> `s3://bucket/tok-8192`).
    An --out with nothing beside it (a bucket, `.`, `/`) is refused: never another bucket."""
    from bpe import storage
    from bpe.errors import SettingsError

    path = storage.beside(out, f"-{size}")
    if path is None:
        if storage.is_remote(out):
            why, instead = "is a bucket (beside it are other buckets)", "a prefix inside it"
        else:
            why, instead = "has no name to add -<size> to", "a directory with a name"
        raise SettingsError(
            f"--also-save: each size is written beside --out, as <out>-<size>, and --out {out} {why}; "
            f"give --out {instead}, such as {storage.join(out, 'tok')}",
            parameter="also_save",
        )
    return path


def save_truncations(tokenizer, out: str, sizes: list[int], force: bool) -> tuple[list[tuple[str, int]], list[int]]:
    """Save `tokenizer.truncated(size)` for each size the run reached, its manifest naming the run's
    --out; returns what was written ((path, size)) and the sizes above what the run reached."""
    saved, not_reached = [], []
    for size in sizes:
        if size > tokenizer.vocab_size:  # pairs ran out before the vocabulary was full
            not_reached.append(size)
            continue
        small = tokenizer.truncated(size)
        small.manifest.truncation.of = str(out)
        path = also_save_path(out, size)
        small.save(path, force=force)
        saved.append((path, size))
    return saved, not_reached


def _say_compiling(progress) -> None:
    """Say, before the long silence, why the first run of a new version is slow."""
    if progress is not None:
        progress.finish()
    print(
        "bpe: compiling the kernels for this version of bpe (first run only: later runs load them from the "
        "cache; the summary says how long it took)...",
        file=sys.stderr,
        flush=True,
    )


def _check_out(out: str, force: bool) -> None:
    """Refuse an --out that training could not publish to, before any input is read."""
    from bpe import storage
    from bpe.formats.manifest_json import TOKENIZER_FILES

    storage.check_target(
        out, TOKENIZER_FILES, force=force, shown=f"--out {out}", replace_hint="use --force to replace it"
    )


def summary(manifest: Manifest, out: str | Path, record: dict | None = None) -> str:
    """The short report printed after training (`summary_record`, or `record`, as text)."""
    from bpe.training.results import why_stopped

    d = summary_record(manifest, out) if record is None else record
    lines = [
        f"trained {str(out).rstrip('/')}/ in {d['seconds'].get('total', 0):.1f} s",
        f"  data      {d['files']} file(s), {d['documents']:,} documents ({d['null_rows']:,} null rows skipped), "
        f"{d['bytes'] / 1e6:,.1f} MB, {_words(d)}",
        f"  merges    {_merges(d)} (vocabulary {d['vocab_size']:,} with {d['special_tokens']} special token(s)); "
        f"stopped: {why_stopped(d['stop_reason'], manifest.settings, IN_FLAGS)}",
        f"  compress  {d['bytes_per_token'] or 0:.3f} bytes per token on the training text",
        f"  time      {_time(d)}",
    ]
    if d["inputs"] is not None:
        lines.insert(2, f"  inputs    {d['inputs']}")
    if d.get("languages"):
        lines.insert(2, f"  languages {_languages(d['languages'])}")
    if d.get("superwords"):
        first, second = d["superwords"]["stages"]
        lines.insert(
            -2,
            f"  stages    subwords {first['merges']:,} merges to {d['superwords']['transition']:,} tokens, "
            f"then superwords {second['merges']:,} merges over {d['pieces']:,} pieces "
            f"({d['unique_pieces']:,} unique pieces)",
        )
    for saved in d.get("also_saved", []):
        where, size = saved["out"].rstrip("/"), saved["vocab_size"]
        lines.append(f"  also      {where}/ (vocabulary {size:,}: the same run's first merges)")
    lines += [f"warning: {w}" for w in d["warnings"]]
    return "\n".join(lines)


def _dev_used(dev: dict) -> str:
    """The parity dev set, and which of its languages the run used when it holds more:
    `dev flores/ (eng, hin of 15 languages)`."""
    available = dev.get("available") or []
    used = dev.get("languages") or list(dev.get("files", {}))
    more = f" ({', '.join(used)} of {len(available)} languages)" if len(available) > len(used) else ""
    return f"dev {dev['path']}{more}"


def _languages(record: dict) -> str:
    """Each language's share of the text (and its multiplier, with a mixture; the merges that
    served it, with parity), then the mixture and the parity rule:
    `eng 84.0% (1,020 merges), hin 16.0% (x4, 890 merges); mix hin=4; parity base by dev ntrex/`."""
    parts = []
    for code, entry in record["by_language"].items():
        notes = [f"x{entry['multiplier']:,}"] if entry["multiplier"] != 1 else []
        notes += [f"{entry['merges']:,} merges"] if "merges" in entry else []
        parts.append(f"{code} {100 * entry['share']:.1f}%" + (f" ({', '.join(notes)})" if notes else ""))
    line = ", ".join(parts)
    if record.get("mix"):
        line += f"; mix {record['mix']['given']}"
    parity = record.get("parity")
    if parity:
        driven = {"dev": _dev_used(parity["dev"]) if parity.get("dev") else "dev", "ratio": "ratios"}
        line += f"; parity {parity['variant']} by {driven.get(parity['lengths'], 'training lengths')}"
        if parity.get("global_merges"):
            line += f", {parity.get('global_merges_made', parity['global_merges']):,} global merges first"
    return line


def _words(d: dict) -> str:
    """What counting found: pre-tokens and unique words (a superword run's first stage's), or the
    pieces of a superword run that starts at the transition (no words counted)."""
    if d["pretokens"] is None:
        return f"{d['pieces']:,} pieces, {d['unique_pieces']:,} unique pieces (of the superword pattern)"
    return f"{d['pretokens']:,} pre-tokens, {d['unique_words']:,} unique words"


def _merges(d: dict) -> str:
    """The merges in the tokenizer: with a base, how many were replayed from it and how many learnt."""
    if not d["base_merges"]:
        return f"{d['merges']:,}"
    return f"{d['merges']:,}: {d['base_merges']:,} replayed from the base, {d['new_merges']:,} learnt"


def _time(d: dict) -> str:
    """Where the time went, in parts that add up to the total: a Dask run's start and stop of its
    cluster and the building of its word buckets among them, and `other` for what no part measures
    (checking the settings, loading kernels, building the tokenizer). The merge loop's rate is over
    the merges it learnt; a base's merges are replayed before it, into the word table."""
    s = d["seconds"]
    merge, loop = s.get("merge", 0.0), s.get("merge_loop", s.get("merge", 0.0))
    replay = ""
    if d["base_merges"] and "build" not in s:  # the Dask engine replays while building its word buckets
        replay = f"replay and word table {max(merge - loop, 0):.2f} s, "
    parts = [
        ("cluster start", s.get("cluster"), ""),
        ("count", s.get("count", 0.0), f" ({_passes(d)}{(d['bytes_per_second'] or 0) / 1e6:,.0f} MB/s)"),
        ("word buckets", s.get("build"), " (base replayed)" if d["base_merges"] else ""),
        ("merge", merge, f" ({replay}loop {loop:.2f} s, {d['merges_per_second'] or 0:,.0f} merges/s)"),
        ("export", s.get("export") or 0.0, ""),
        ("cluster stop", s.get("cluster_stop"), ""),
    ]
    if s.get("compile", 0) >= 0.5:
        parts.append(("compile", s["compile"], " (first run of this version only)"))
    shown = [(name, seconds, note) for name, seconds, note in parts if seconds is not None]
    other = s.get("total", 0) - sum(seconds for _, seconds, _ in shown)
    if other >= 0.005:
        shown.append(("other", other, ""))
    return ", ".join(f"{name} {seconds:.2f} s{note}" for name, seconds, note in shown)


def _passes(d: dict) -> str:
    """A superword run reads its text once per stage: say so beside the counting rate."""
    return f"{d['count_passes']} passes, " if d["count_passes"] > 1 else ""


def summary_record(manifest: Manifest, out: str | Path, total_seconds: float | None = None) -> dict:
    """What the summary shows, as data (`bpe train --json`): rates in the progress bars' units
    (text bytes per second of counting, each of a superword run's `count_passes` over the text
    counted; merges learnt per second of the merge loop alone, which a
    base's merges, replayed before it, are not part of). `merges` counts the tokenizer's merges:
    `base_merges` replayed from a base (0 without one), then `new_merges` learnt. A superword
    run's `pretokens` and `unique_words` are its first stage's (None when it starts at the
    transition), `pieces` and `unique_pieces` its second stage's (None for other runs). The time
    in all is `total_seconds` (the command's, saving included) when given, else the manifest's."""
    c, r, phases = manifest.counts, manifest.result, manifest.seconds.phases
    shards = manifest.data.shards
    count_s, loop_s = phases.get("count", 0.0), phases.get("merge_loop", phases.get("merge", 0.0))
    inputs = None
    if isinstance(shards, list):  # which kinds of file, how text files were read, --sample and --limit
        from bpe.inputs.discover import describe_inputs

        inputs = describe_inputs([f["path"] for f in shards], manifest.settings)
    from bpe.training.trainer import stopped_early

    stopped = stopped_early(manifest, IN_FLAGS)
    warned = [stopped] if stopped is not None else []
    seconds = manifest.seconds.to_json()
    if total_seconds is not None:
        seconds["total"] = round(total_seconds, 3)
    base_merges = manifest.settings.base_merges or 0
    words, pieces = (c.pretokens, c.unique_words), (None, None)
    passes = 1
    if manifest.superwords is not None:
        passes = sum(1 for stage in manifest.superwords.stages if stage["seconds"].get("count")) or 1
        first = manifest.superwords.stages[0]
        words, pieces = (first["pretokens"] or None, first["unique_words"] or None), words
    return {
        "out": str(out),
        "vocab_size": r.vocab_size,
        "merges": r.merges,
        "base_merges": base_merges,
        "new_merges": r.merges - base_merges,
        "special_tokens": len(manifest.settings.special_tokens),
        "stop_reason": r.stop_reason,
        "bytes_per_token": r.bytes_per_token,
        "files": len(shards) if isinstance(shards, list) else 0,
        "inputs": inputs,
        "documents": c.documents,
        "null_rows": c.null_rows,
        "bytes": c.bytes,
        "pretokens": words[0],
        "unique_words": words[1],
        "pieces": pieces[0],
        "unique_pieces": pieces[1],
        "seconds": seconds,
        "count_passes": passes,
        "bytes_per_second": c.bytes * passes / count_s if count_s else None,
        "merges_per_second": (r.merges - base_merges) / loop_s if loop_s else None,
        "engine": manifest.engine.to_json(),
        "superwords": manifest.superwords.to_json() if manifest.superwords is not None else None,
        "languages": manifest.languages.to_json() if manifest.languages is not None else None,
        "warnings": warned,
    }
