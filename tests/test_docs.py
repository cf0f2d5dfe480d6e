"""The documentation: the site (`docs/`, `mkdocs.yml`) builds with `mkdocs build --strict`, and every
shell and Python block of its pages and of the README runs as written, or says why it does not.

How blocks run (docs/contributing.md says the same to writers): each page's blocks run in order in
a temporary directory of their own that holds the project's small inputs (`INPUTS`), so a block may
use what an earlier block of the page made. A block tagged `bash` runs as one bash script (exit on
the first failing command, `bpe` and `python` from this environment); one tagged `python` runs in
one namespace per page, which starts with `texts` (a list of documents) and `dataset` (rows as
dicts). A block that cannot run here (it starts services, needs Docker, the network or a place
that does not exist here, or runs for minutes) has the line `<!-- not run: why -->` right above
its fence. Every fence names its language; a shell or Python block in any other spelling (`sh`,
`console`, `pycon`, ...) must be marked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import GPT2, stdlib_paragraphs, write_parquet

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = sorted(p.relative_to(REPO).as_posix() for p in DOCS.rglob("*.md")) + ["README.md"]
RUNNERS = ("bash", "python")
# Spellings of shell and Python that the runner does not take: such a block must be marked.
OTHER_RUNNABLE = ("sh", "shell", "console", "zsh", "py", "pycon", "python3", "ipython")
NOT_RUN = re.compile(r"<!-- not run: (\S.*) -->")
INPUTS = "data/ (two Parquet shards), corpus/ (a .txt and a .jsonl), notes.txt.gz, gpt2/ (GPT-2's files)"
# The pages a newcomer reads first run where the quick start left them, with only what it left
# (`demo-data/`, the demo corpus) and, in Python, nothing defined: their examples make the rest.
FRONT_DOOR = ("README.md", "docs/index.md", "docs/getting-started.md")


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    not_run: str | None  # the reason, for a marked block

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.language or 'no language'})"


def blocks(page: str) -> list[Block]:
    """The fenced code blocks of a page, in order."""
    found, lines = [], (REPO / page).read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)(`{3,}|~{3,})\s*([^`\s{]*)", lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, language = opening.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        previous = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        marked = NOT_RUN.fullmatch(previous)
        code = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end]) + "\n"
        found.append(Block(page, i + 1, language.lower(), code, marked.group(1) if marked else None))
        i = end + 1
    return found


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return stdlib_paragraphs()[:600]


@pytest.fixture(scope="module")
def after_the_demo(tmp_path_factory) -> Path:
    """A directory as the quick start leaves it: the demo corpus in demo-data/, as `bpe demo` writes it."""
    root = tmp_path_factory.mktemp("after-the-demo")
    paragraphs = stdlib_paragraphs()
    for i in range(4):  # bpe.pipeline.demo.write_demo_corpus's shards, from the suite's copy of the paragraphs
        write_parquet(root / "demo-data" / f"part-{i:05d}.parquet", list(paragraphs[i::4]))
    return root


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, texts) -> Path:
    """The small inputs every page's blocks see (`INPUTS`)."""
    import gzip
    import json

    root = tmp_path_factory.mktemp("inputs")
    write_parquet(root / "data" / "part-0.parquet", texts[0::2])
    write_parquet(root / "data" / "part-1.parquet", texts[1::2])
    (root / "corpus").mkdir()
    (root / "corpus" / "a.txt").write_text("\n".join(texts[:300]))
    with open(root / "corpus" / "b.jsonl", "w") as rows:
        rows.writelines(json.dumps({"text": t}) + "\n" for t in texts[300:600])
    with gzip.open(root / "notes.txt.gz", "wt") as notes:
        notes.write("Some notes.\nA second line of them.\n")
    (root / "gpt2").mkdir()
    if (GPT2 / "merges.txt").exists():
        for name in ("vocab.json", "merges.txt"):
            shutil.copy(GPT2 / name, root / "gpt2" / name)
    else:  # a stand-in in GPT-2's format, where the released files are not beside the clone
        from bpe import train

        train(texts, vocab_size=2000, pattern="gpt2", special_tokens=["<|endoftext|>"]).save(root / "stand-in")
        for name in ("vocab.json", "merges.txt"):
            shutil.move(root / "stand-in" / name, root / "gpt2" / name)
        shutil.rmtree(root / "stand-in")
    return root


def test_every_block_names_its_language_and_runs_or_says_why_not():
    unnamed = [str(b) for page in PAGES for b in blocks(page) if not b.language]
    assert not unnamed, f"fences without a language: {unnamed}"
    unmarked = [str(b) for page in PAGES for b in blocks(page) if b.language in OTHER_RUNNABLE and b.not_run is None]
    assert not unmarked, f"shell or Python blocks the tests do not run, not marked <!-- not run: why -->: {unmarked}"
    stray = [
        f"{page}:{n}"
        for page in PAGES
        for n, line in enumerate((REPO / page).read_text().splitlines(), 1)
        if "not run" in line and line.strip().startswith("<!--") and not NOT_RUN.fullmatch(line.strip())
    ]
    assert not stray, f"not-run markers without a reason, or misspelt: {stray}"
    assert sum(runs(b) for page in PAGES for b in blocks(page)) >= 20


def test_no_block_writes_into_the_repository():
    """Blocks, run or not, write into the reader's working directory or a temporary one: a copied
    command never overwrites the site's own files (a plot written to `docs/languages.png`)."""
    writing = re.compile(r"(?:--plot|--out|--json|-o|>)\s*['\"]?(?:\./)?docs/")
    found = [str(b) for page in PAGES for b in blocks(page) if writing.search(b.code)]
    assert not found, f"blocks that write into docs/: {found}"


def runs(block: Block) -> bool:
    return block.language in RUNNERS and block.not_run is None


@pytest.mark.parametrize("page", [p for p in PAGES if any(runs(b) for b in blocks(p))])
def test_the_blocks_of_each_page_run_as_written(page, inputs, after_the_demo, texts, tmp_path, monkeypatch):
    work = tmp_path / "work"
    shutil.copytree(after_the_demo if page in FRONT_DOOR else inputs, work)
    monkeypatch.chdir(work)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    namespace = {"__name__": "__main__"}
    if page not in FRONT_DOOR:
        namespace.update(texts=list(texts), dataset=[{"text": t} for t in texts])
    for block in blocks(page):
        if not runs(block):
            continue
        if block.language == "bash":
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block.code],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, f"{block}:\n{block.code}\nstderr: {done.stderr[-3000:]}"
        else:
            exec(compile(block.code, str(block), "exec"), namespace)


def block_under(page: str, heading: str) -> Block:
    """The first block after the line `heading` of `page`."""
    start = (REPO / page).read_text().splitlines().index(heading) + 1
    return next(block for block in blocks(page) if block.line > start)


def test_the_train_encode_decode_block_runs_as_written_and_does_what_its_comments_say(after_the_demo, tmp_path):
    """Getting started's block (the README shows the same lines; both are marked not run, as this
    test runs them) runs line by line where the quick start left a newcomer (only demo-data/), and
    each line does what its comment says."""
    block = block_under("docs/getting-started.md", "## Train, encode, decode")
    assert block_under("README.md", "## Train, encode, decode").code == block.code
    lines = [line for line in block.code.splitlines() if line.strip()]
    assert lines[0].startswith("bpe train ") and lines[-1].startswith("bpe decode ")
    work = tmp_path / "work"
    shutil.copytree(after_the_demo, work)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    outputs = []
    for line in lines:
        done = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (line, done.stderr[-2000:])
        outputs.append(done.stdout)
    piped, argument = outputs[1], outputs[2]
    assert piped == argument and piped.split()
    assert outputs[-1] == "Hello world\n"
    assert np.load(work / "ids.npy").size > 0 and (work / "docs.npy").exists()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once for the tests that read its pages: `mkdocs build --strict` fails on any
    warning (a broken link or anchor, a page left out of the navigation, an API object that does
    not resolve)."""
    site = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr[-5000:]
    return site


def test_the_site_builds_without_a_warning(site):
    """The site builds (the fixture), and the generated pages hold what they promise."""
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("bpe train", "bpe encode", "bpe versions", "bpe cluster up"):
        assert f"<code>{command}</code>" in cli, command
    assert "--vocab-size" in (site / "reference" / "settings" / "index.html").read_text()
    api = (site / "reference" / "python" / "index.html").read_text()
    assert "encode_batch_to_numpy" in api and "<blockquote>" not in api  # doctests shown as code, not quotes


def test_the_command_reference_opens_with_contents_linking_every_command(site):
    from bpe.cli import build_parser, commands

    cli = (site / "reference" / "cli" / "index.html").read_text()
    article = cli[cli.index("<h1") :]
    contents = article[: article.index("<h2")]  # what comes before the first command's section
    for prog, _ in commands(build_parser()):
        anchor = prog.replace(" ", "-")
        assert f'href="#{anchor}"' in contents, f"{prog} is not in the contents"
        assert f'id="{anchor}"' in article, f"{prog} has no section of that id"


def test_the_settings_tables_never_break_a_name(site):
    """A name (setting, flag, key, type) in a settings table is code of the class `nowrap`, which
    the site's CSS keeps on one line: a narrow column cut them mid-word (`vocab_siz` / `e`)."""
    page = (site / "reference" / "settings" / "index.html").read_text()
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", page, re.S)
    assert len(rows) >= 40 and any("--vocab-size" in names for names, _ in rows)
    for names, kind in rows:
        codes = re.findall(r"<code[^>]*>", names + kind)
        assert codes and all('class="nowrap"' in code for code in codes), (names, kind)
    styles = [(site / link).read_text() for link in re.findall(r'<link[^>]+href="\.\./\.\./([^"]+\.css)"', page)]
    assert any(re.search(r"code\.nowrap\s*\{[^}]*white-space:\s*nowrap", css) for css in styles)


def test_the_versions_page_shows_what_bpe_versions_prints(tmp_path):
    """The listing on the Versions page is what `bpe versions` prints for the store its commands
    make: the three versions' manifests as those runs of the demo wrote them."""
    from bpe.pipeline.store import VersionStore
    from tests.conftest import publish_as

    store = VersionStore(str(tmp_path), "demo")
    for channel, created, vocab_size, bytes_per_token in [
        ("main", "2026-12-06T02:47:59+00:00", 4096, 3.7506),
        ("main", "2026-12-06T02:49:23+00:00", 4096, 3.7074),  # BPE_PATTERN=gpt2
        ("experiment", "2026-12-06T02:51:12+00:00", 8192, 4.1787),  # --vocab-size 8192, promoted by bpe demo
    ]:
        publish_as(store, channel, True, bytes_per_token, "bab2f030", vocab_size, created, 4, 1_480_041)
    bpe = Path(sys.executable).parent / "bpe"
    done = subprocess.run([bpe, "versions", tmp_path / "demo"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    shown = next(b for b in blocks("docs/pipeline/versions.md") if b.code.startswith("version   created"))
    assert shown.language == "text" and done.stdout == shown.code


def test_the_readme_is_a_front_door_whose_links_lead_to_the_pages():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    missing = [link for link in local if not (REPO / link).is_file()]
    assert local and not missing, missing
    assert {"docs/getting-started.md", "docs/benchmarks.md", "docs/reference/cli.md"} <= set(local)
    assert "mkdocs serve" in readme and "source .venv/bin/activate" in readme


def test_the_api_reference_shows_trains_defaults_as_values(site):
    """`train()` reads its defaults from the schema (`DEFAULT["vocab_size"]`); the reference shows
    the values a caller gets, as `help(train)` does."""
    import html

    from bpe.schema import DEFAULT

    api = html.unescape(re.sub(r"<[^>]+>", "", (site / "reference" / "python" / "index.html").read_text()))
    signature = re.sub(r"\s+", " ", api[api.index("train(") :])
    assert "DEFAULT[" not in signature[:3000]
    assert f"vocab_size: int = {DEFAULT['vocab_size']}" in signature
    assert f"parity_window: int = {DEFAULT['parity_window']}" in signature
