"""Build the training corpus: the docstrings of the Python standard library.

Every Python installation carries its standard library's source, so the
corpus rebuilds anywhere with no download:

    python tools/build_corpus.py   # writes reference/data/{train,val,code}.txt and PROVENANCE.md

Steps: walk the stdlib source directory (skipping test packages, idlelib,
lib2to3 and site-packages), parse each file with `ast`, take the module,
class and function docstrings (`ast.get_docstring` dedents them), clean them
to the tokenizer's vocabulary, drop exact duplicates, and split by document
into train and validation with a seeded hash, so the split of a document does
not depend on which other documents exist.

code.txt is text of another kind for measuring the models out of their
domain (benchmarks/bench_pretrained.py): the source code of a fixed list of
standard-library modules (CODE_FILES) with their docstrings removed, reduced
to the vocabulary the same way, cut to CODE_CHARS characters.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import platform
import sys
import sysconfig
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from reference.tokenizer import VOCAB  # noqa: E402

DATA_DIR = REPO / "reference" / "data"
SKIP_DIRS = {"test", "tests", "idle_test", "idlelib", "lib2to3", "site-packages", "__pycache__", "_bundled"}
SKIP_PREFIXES = ("config-", "lib-dynload")
VAL_PERCENT = 5  # share of documents that go to validation
MAX_FOREIGN = 0.1  # a docstring with more than this share of non-vocabulary characters is dropped whole
MAX_BYTES = 3_000_000  # train + val together
LICENSE_START = "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2"  # the section of LICENSE.txt copied
LICENSE_END = "BEOPEN.COM LICENSE AGREEMENT"  # the heading after it
SEP = "\n\n"  # between documents (and between the files of code.txt)
# code.txt: modules with few comments and no characters outside the vocabulary,
# in this order; with their docstrings removed they hold about 75,000 characters.
CODE_FILES = (
    "json/decoder.py",
    "json/encoder.py",
    "json/scanner.py",
    "csv.py",
    "copy.py",
    "sched.py",
    "bisect.py",
    "glob.py",
    "calendar.py",
)
CODE_CHARS = 256 * 256 + 1  # 256 windows of 256 predicted characters, as bench_pretrained scores them
_VOCAB = set(VOCAB)
_SCOPES = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)  # the nodes that can hold a docstring, with the module


def stdlib_files(root: Path) -> list[Path]:
    """The .py files of the standard library under root, sorted, minus skipped packages."""
    files = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts[:-1]
        if any(p in SKIP_DIRS or p.startswith(SKIP_PREFIXES) for p in parts):
            continue
        if path.name.startswith("test_"):
            continue
        files.append(path)
    return files


def docstrings(source: str) -> list[str]:
    """Module, class and function docstrings of one source file, in source order."""
    tree = ast.parse(source)
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, _SCOPES)]
    nodes.sort(key=lambda n: getattr(n, "lineno", 0))
    found = []
    for node in nodes:
        doc = ast.get_docstring(node, clean=True)
        if doc:
            found.append(doc)
    return found


def normalized(text: str) -> str:
    """text with CRLF and CR turned into newlines and tabs into spaces (tab stops of 8)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").expandtabs(8)


def foreign_chars(text: str) -> int:
    """How many characters of text are outside the tokenizer's vocabulary."""
    return sum(ch not in _VOCAB for ch in text)


def to_vocab(text: str) -> str:
    """Normalized text in the vocabulary: accented letters lose their accents
    (NFKD), other characters outside it are dropped, trailing spaces are stripped."""
    if foreign_chars(text):
        text = unicodedata.normalize("NFKD", text)
        text = "".join(ch for ch in text if ch in _VOCAB)
    return "\n".join(line.rstrip() for line in text.split("\n"))


def clean(doc: str) -> str | None:
    """doc reduced to the tokenizer's vocabulary, or None if too little of it is in it.

    Tabs become spaces, accented letters lose their accents, other characters
    outside the vocabulary are dropped, trailing spaces are stripped.
    """
    doc = normalized(doc)
    if foreign_chars(doc) > MAX_FOREIGN * len(doc):
        return None
    doc = to_vocab(doc).strip("\n")
    while "\n\n\n" in doc:
        doc = doc.replace("\n\n\n", "\n\n")
    return doc or None


def without_docstrings(source: str) -> str:
    """source minus the lines of its module, class and function docstrings
    (the text the training corpus is made of); comments and code stay."""
    tree = ast.parse(source)
    drop: set[int] = set()  # 0-based line numbers
    for node in [tree] + [n for n in ast.walk(tree) if isinstance(n, _SCOPES)]:
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            drop.update(range(first.lineno - 1, first.end_lineno))
    return "\n".join(line for i, line in enumerate(source.split("\n")) if i not in drop)


def code_text(root: Path, files: tuple[str, ...] = CODE_FILES, chars: int = CODE_CHARS) -> tuple[str, int]:
    """The out-of-domain text: the files under root, in order, without their
    docstrings, reduced to the vocabulary as the docstrings are, joined by a
    blank line and cut to its first `chars` characters; and how many characters
    outside the vocabulary the kept part of the sources held before reduction."""
    texts, foreign = [], 0
    for name in files:
        text = normalized(without_docstrings((root / name).read_text(encoding="utf-8")))
        foreign += foreign_chars(text)
        texts.append(to_vocab(text).strip("\n"))
    text = (SEP.join(texts) + "\n")[:chars]
    if len(text) < chars:
        raise ValueError(f"{', '.join(files)} under {root} hold only {len(text):,} characters, fewer than {chars:,}")
    return text, foreign


def is_val(doc: str, seed: int) -> bool:
    digest = hashlib.sha256(f"{seed}:{doc}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % 100 < VAL_PERCENT


def collect(root: Path) -> tuple[list[str], dict[str, int]]:
    """Cleaned, deduplicated docstrings under root, and counts of what was seen."""
    stats = {"files": 0, "unparsable_files": 0, "docstrings": 0, "dropped_foreign": 0, "duplicates": 0}
    seen: set[str] = set()
    docs = []
    for path in stdlib_files(root):
        try:
            found = docstrings(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            stats["unparsable_files"] += 1
            continue
        stats["files"] += 1
        for raw in found:
            stats["docstrings"] += 1
            doc = clean(raw)
            if doc is None:
                stats["dropped_foreign"] += 1
            elif doc in seen:
                stats["duplicates"] += 1
            else:
                seen.add(doc)
                docs.append(doc)
    return docs, stats


def psf_license(root: Path) -> str | None:
    """The PSF License Version 2 section of the installation's LICENSE.txt, if it ships one."""
    path = root / "LICENSE.txt"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    start = text.find(LICENSE_START)
    end = text.find(LICENSE_END, start)
    return text[start:end].rstrip() + "\n" if start >= 0 and end > start else None


def build(out_dir: Path = DATA_DIR, seed: int = 0) -> dict[str, int]:
    """Write train.txt, val.txt, code.txt, PROVENANCE.md and PSF-LICENSE.txt
    into out_dir; return sizes and counts."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs, stats = collect(root)
    train = [d for d in docs if not is_val(d, seed)]
    val = [d for d in docs if is_val(d, seed)]
    train_text, val_text = SEP.join(train) + "\n", SEP.join(val) + "\n"
    while len(train_text) + len(val_text) > MAX_BYTES:  # keep the cap by dropping the last documents
        train.pop()
        train_text = SEP.join(train) + "\n"
    code, code_foreign = code_text(root)
    stats.update(train_docs=len(train), val_docs=len(val), train_chars=len(train_text), val_chars=len(val_text))
    stats.update(code_chars=len(code), code_foreign=code_foreign)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "train.txt").write_text(train_text, encoding="ascii", newline="\n")
    (out_dir / "val.txt").write_text(val_text, encoding="ascii", newline="\n")
    (out_dir / "code.txt").write_text(code, encoding="ascii", newline="\n")
    (out_dir / "PROVENANCE.md").write_text(provenance(root, seed, stats), encoding="utf-8", newline="\n")
    licence = psf_license(root)
    if licence is None:
        print(f"note: no PSF License section in {root / 'LICENSE.txt'}; PSF-LICENSE.txt left as it was")
    else:
        (out_dir / "PSF-LICENSE.txt").write_text(licence, encoding="utf-8", newline="\n")
    return stats


def provenance(root: Path, seed: int, s: dict[str, int]) -> str:
    """PROVENANCE.md: where the corpus and code.txt come from, how they were made, and their licence."""
    return corpus_provenance(root, seed, s) + code_provenance(s) + LICENCE_SECTION


def corpus_provenance(root: Path, seed: int, s: dict[str, int]) -> str:
    """PROVENANCE.md's sections on train.txt and val.txt: source, method and sizes."""
    return f"""# Corpus provenance

`train.txt` and `val.txt` are the docstrings of the CPython {platform.python_version()}
standard library, extracted by `tools/build_corpus.py` (seed {seed}).

## Source

The `.py` files under the standard library directory of CPython
{platform.python_version()} (`sysconfig.get_paths()["stdlib"]`, here `{root.name}/`),
excluding test packages (`test/`, `tests/`, `idle_test/`, `test_*.py`),
`idlelib/`, `lib2to3/`, `site-packages/`, `ensurepip/_bundled/`,
`config-*/` and `lib-dynload/`.

## Method

1. Parse every file with `ast` ({s["files"]} files; {s["unparsable_files"]} could not be parsed and were skipped).
2. Take every module, class and function docstring in source order
   (`ast.get_docstring(..., clean=True)`, which dedents): {s["docstrings"]} docstrings.
3. Clean to the tokenizer's vocabulary (newline and printable ASCII): tabs become
   spaces, accents are stripped (NFKD), other characters are dropped, trailing
   spaces are removed, runs of blank lines become one. A docstring with more than
   {MAX_FOREIGN:.0%} of its characters outside the vocabulary is dropped whole
   ({s["dropped_foreign"]} dropped). Exact duplicates are dropped ({s["duplicates"]}).
4. Split by document: a document goes to validation when the SHA-256 of
   `"{seed}:" + text` falls in the first {VAL_PERCENT}% of the range, otherwise to training.
   Documents are joined with one blank line, in source order.

## Sizes

| file | documents | characters (= bytes = tokens) |
|---|---|---|
| train.txt | {s["train_docs"]} | {s["train_chars"]:,} |
| val.txt | {s["val_docs"]} | {s["val_chars"]:,} |
| code.txt (below) | {len(CODE_FILES)} source files | {s["code_chars"]:,} |

"""


def code_provenance(s: dict[str, int]) -> str:
    """PROVENANCE.md's section on code.txt, the out-of-domain text."""
    return f"""## Out-of-domain text: `code.txt`

Text of another kind than the corpus, for measuring the models outside the
domain they were trained on (`benchmarks/bench_pretrained.py`): Python source
code rather than the prose of its docstrings. Extracted by the same script
from the same installation:

1. Read these files of the standard library directory, in this order:
   {", ".join(f"`{f}`" for f in CODE_FILES)}.
2. Remove the lines of every module, class and function docstring (found with
   `ast`), so it holds none of the docstrings the corpus is made of; comments,
   other string literals and code stay.
3. Reduce to the vocabulary as step 3 above does, without dropping anything
   whole and without merging blank lines: tabs become spaces, accents are
   stripped, other characters are dropped, trailing spaces are removed. The
   kept source held {s["code_foreign"]} characters outside the vocabulary.
4. Join the files with one blank line and keep the first {CODE_CHARS:,}
   characters.

"""


# PROVENANCE.md's last section: the same for every build.
LICENCE_SECTION = """## Licence

The docstrings and the code are part of CPython, copyright Python Software
Foundation, All Rights Reserved, and are redistributed here under the Python
Software Foundation License Version 2. That licence grants the right to reproduce,
prepare derivative works of and distribute Python, alone or in any derivative
version, provided the PSF License Agreement and PSF's copyright notice are
retained, and asks a derivative work to include a brief summary of its
changes. `PSF-LICENSE.txt` beside this file is the agreement with its
copyright notice, copied from the `LICENSE.txt` of the installation the corpus
was built from; the Method section and the steps of the code.txt section above
are the summary of changes.
This corpus and code.txt are under the PSF License, not under the project's
own licence.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the train/validation split")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="directory to write the corpus into")
    args = parser.parse_args()
    stats = build(args.out, args.seed)
    print(" ".join(f"{k}={v}" for k, v in stats.items()))


if __name__ == "__main__":
    main()
