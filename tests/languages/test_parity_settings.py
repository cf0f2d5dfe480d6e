"""Parity-aware training through its surfaces: `train(parity_dev=..., parity_ratio=..., ...)` and
`bpe train --parity-dev ...` make the reference parity trainer's merges on the same pieces, with
every setting (variant, window, alpha, global merges, ratios, a mixture), and together with a base
tokenizer (`--from`), `--max-token-length`, special tokens and `--also-save`; the manifest says
which language each merge served."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bpe import Tokenizer
from bpe.cli import main
from bpe.training.counting import count_words
from bpe.training.trainer import train
from tests.reference import reference_parity_run

PATTERN = "gpt2"
TEXTS = {
    "eng": ["the cat sat on the mat", "the dog sat on the log", "lower and lowest and newest"] * 6,
    "hin": ["नमस्ते दुनिया", "दुनिया बड़ी और सुंदर है", "किताब मेज़ पर है"] * 3,
    "ell": ["καλημέρα κόσμε", "ο κόσμος είναι μεγάλος", "το βιβλίο είναι στο τραπέζι"] * 2,
}
DEV = {
    "eng": ["The cat sleeps.", "The book is on the table."],
    "hin": ["बिल्ली सोती है।", "किताब मेज़ पर है।"],
    "ell": ["Η γάτα κοιμάται.", "Το βιβλίο είναι στο τραπέζι."],
}
CODES = sorted(TEXTS)  # ell, eng, hin: language i is the i-th code


def counts(texts: list[str], special_tokens: tuple[str, ...] = ()) -> dict[bytes, int]:
    return count_words(texts, PATTERN, special_tokens).to_dict()


@pytest.fixture
def dev(tmp_path) -> Path:
    """The dev set as a directory: a file per language, line i the same sentence in each."""
    directory = tmp_path / "dev"
    directory.mkdir()
    for code, sentences in DEV.items():
        (directory / f"{code}.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    return directory


def served(tok: Tokenizer) -> dict:
    record = tok.manifest.languages
    return {"global": record.parity.get("global_merges_made"), **{c: record.by_language[c]["merges"] for c in CODES}}


def expected_served(languages: list[int]) -> dict:
    made = Counter(languages)
    return {"global": made[-1], **{code: made[i] for i, code in enumerate(CODES)}}


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"parity_variant": "window", "parity_window": 8, "parity_alpha": 1.5},
        {"global_merges": 12},
        {"global_merges": 5, "parity_variant": "window", "parity_window": 4, "parity_alpha": 1.0, "tie_break": "ids"},
        {"min_frequency": 3},
        {"max_token_length": 4},
    ],
)
def test_a_dev_set_run_makes_the_reference_parity_trainers_merges(dev, options):
    tok = train(texts=TEXTS, parity_dev=str(dev), vocab_size=330, pattern=PATTERN, **options)
    rule = {
        "variant": options.get("parity_variant", "base"),
        "window": options.get("parity_window", 100),
        "alpha": options.get("parity_alpha", 2.0),
        "global_merges": options.get("global_merges", 0),
    }
    more = {k: options[k] for k in ("tie_break", "min_frequency", "max_token_length") if k in options}
    reference = reference_parity_run(
        [counts(TEXTS[c]) for c in CODES], 330 - 256, dev=[counts(DEV[c]) for c in CODES], **rule, **more
    )
    assert tok.merges == reference.merges and len(tok.merges) > 20
    assert served(tok) == expected_served(reference.languages)
    parity = tok.manifest.languages.parity
    assert {k: parity[k] for k in rule} == rule and parity["lengths"] == "dev"
    assert sorted(parity["dev"]["files"]) == CODES and all(
        len(f["sha256"]) == 64 for f in parity["dev"]["files"].values()
    )


def test_ratio_targets_training_lengths_and_a_mixture_make_the_reference_trainers_merges():
    ratios = {"eng": 1.0, "hin": 2.5, "ell": 1.5}
    tok = train(texts=TEXTS, parity_ratio=ratios, vocab_size=320, pattern=PATTERN)
    reference = reference_parity_run([counts(TEXTS[c]) for c in CODES], 64, ratio=tuple(ratios[c] for c in CODES))
    assert tok.merges == reference.merges and tok.manifest.languages.parity["ratio"] == ratios
    assert tok.manifest.languages.parity["lengths"] == "ratio"
    plain = train(texts=TEXTS, parity=True, vocab_size=320, pattern=PATTERN)
    assert plain.merges == reference_parity_run([counts(TEXTS[c]) for c in CODES], 64).merges
    assert plain.manifest.languages.parity["lengths"] == "training"
    # a mixture multiplies each language's counts first (here 1, 2, 3 for ell, eng, hin)
    mixed = train(texts=TEXTS, parity=True, global_merges=10, mix="eng=2,hin=3", vocab_size=320, pattern=PATTERN)
    weighted = [{w: n * m for w, n in counts(TEXTS[c]).items()} for c, m in zip(CODES, (1, 2, 3), strict=True)]
    assert mixed.merges == reference_parity_run(weighted, 64, global_merges=10).merges


def test_parity_extends_a_base_tokenizer_with_special_tokens(dev, tmp_path):
    """`--from`: the base's merges are replayed on the training and dev words first, its ids kept;
    special tokens are kept whole in the training and the dev text."""
    base = train(TEXTS["eng"], vocab_size=280, pattern=PATTERN)
    base.save(tmp_path / "base")
    texts = {code: [f"{t}<|endoftext|>" for t in texts] for code, texts in TEXTS.items()}
    (dev / "eng.txt").write_text("The cat<|endoftext|> sleeps.\nThe book is on the table.\n", encoding="utf-8")
    special = ("<|endoftext|>",)
    tok = train(texts=texts, parity_dev=str(dev), base=str(tmp_path / "base"), special_tokens=special, vocab_size=340)
    dev_counts = [
        counts(["The cat<|endoftext|> sleeps.", DEV["eng"][1]] if c == "eng" else DEV[c], special) for c in CODES
    ]
    reference = reference_parity_run(
        [counts(texts[c], special) for c in CODES], 340 - 280 - 1, dev=dev_counts, base=base.merges
    )
    assert tok.merges == reference.merges and tok.merges[: len(base.merges)] == base.merges
    assert tok.special_tokens == {"<|endoftext|>": 340 - 1}
    assert sum(tok.manifest.languages.by_language[c]["merges"] for c in CODES) == 340 - 280 - 1


def test_the_command_trains_with_parity_and_also_saves_the_first_merges(dev, tmp_path, capsys):
    for code, texts in TEXTS.items():
        (tmp_path / f"{code}.txt").write_text("\n".join(texts), encoding="utf-8")
    out = tmp_path / "tok"
    langs = [a for code in CODES for a in ("--lang", f"{code}={tmp_path / f'{code}.txt'}")]
    args = [*langs, "--text-format", "lines", "--pattern", PATTERN, "--parity-dev", dev, "--vocab-size", 330]
    assert main([str(a) for a in ["train", *args, "--out", out, "--also-save", "300"]]) == 0
    printed = capsys.readouterr().out
    assert f"parity base by dev {dev}" in printed and " merges)" in printed
    tok = Tokenizer.load(out)
    assert tok.merges == train(texts=TEXTS, parity_dev=str(dev), vocab_size=330, pattern=PATTERN).merges
    small = Tokenizer.load(f"{out}-300")
    assert small.merges == train(texts=TEXTS, parity_dev=str(dev), vocab_size=300, pattern=PATTERN).merges
    record = json.loads((out / "manifest.json").read_text())["languages"]
    assert record["parity"]["dev"]["path"] == str(dev) and record["codes"] == CODES


def test_the_dev_set_is_part_of_the_datas_fingerprint(dev, tmp_path):
    """Parity's merges depend on the dev set: another dev set is other data to the pipeline's
    "no new data" check, which compares fingerprints."""
    files = {}
    for code, texts in TEXTS.items():
        (tmp_path / f"{code}.txt").write_text("\n".join(texts), encoding="utf-8")
        files[code] = str(tmp_path / f"{code}.txt")
    options = {"files": files, "text_format": "lines", "parity_dev": str(dev), "vocab_size": 300}
    before = train(**options).manifest.data.fingerprint
    assert train(**options).manifest.data.fingerprint == before
    (dev / "hin.txt").write_text("किताब मेज़ पर है।\nबिल्ली सोती है।\n", encoding="utf-8")
    assert train(**options).manifest.data.fingerprint != before
