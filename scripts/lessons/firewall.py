"""The corpus firewall: no task family's words or identifiers in product code, no held-out family's in the tests.

A rule the service learns from must be a general method (a sentence shape, a unit, an identifier form), never a
family's phrasing, field, value or pitfall. Product code that quotes a family has been fitted to it, and its figures
on that family stop measuring anything. This module finds such quotes:

* **shingles** — any run of six words (`SHINGLE`; eight in the tests, `TEST_SHINGLE`; a Chinese character counts as
  a word) of a family's text
  (description, convention titles and oracle lessons, task prompts, every feedback text);
* **identifiers** — what a family defines: its company's name and the distinctive first word of it, its file
  names, its column names that are compound identifiers (`dest_country`), its task-id prefix (`pw-3`), and its
  distinctive answer values (numbers with four or more significant digits, strings of six or more characters).

`scan(paths, families)` returns every hit as a `Hit` (file, line, what matched, which family). Product code
(`memos_bridge/`, `adapters/`) must hold no hit of any family, of any split; `tests/` must hold no hit of a
`report` or `fresh` family (dev families may be quoted there: they are for tuning).

    python scripts/lessons/firewall.py              # scan the product and the tests, print the hits
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `lessons` importable as the other scripts do
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lessons.corpus import FAMILIES, Family, load_corpus

ROOT = Path(__file__).resolve().parents[2]
#: Words in a quoted run: six is short enough to catch a copied clause, long enough that common English
#: ("the number of rows in the") does not make a family sentence.
SHINGLE = 6
#: In the tests, which may quote dev families at will, a held-out quote is a longer run: six common words
#: ("is off by a factor of") occur in tests written long before a family that happens to say them.
TEST_SHINGLE = 8
#: Files that are read as text when scanned.
TEXT_SUFFIXES = {".py", ".md", ".txt", ".json", ".toml", ".yaml", ".yml", ".ts", ".js", ".mjs", ".html", ".css", ".cfg"}
_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?|[\u3400-\u9fff]")
#: Generic words that a company or file name may start with; they identify nothing.
_GENERIC = {
    "north", "south", "east", "west", "city", "data", "central", "united", "global", "first", "great", "new",
    "the", "blue", "green", "red", "golden", "silver", "royal", "national", "general", "metro", "harbour", "river",
    "export", "exports", "report", "reports", "daily", "monthly", "weekly", "sales", "orders", "records", "input",
    "answer", "summary",
}  # fmt: skip


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    kind: str  # shingle | identifier
    text: str
    family: str
    split: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind} of {self.family} ({self.split}): {self.text!r}"


_TOKEN = re.compile(r"[a-z0-9]+|[\u3400-\u9fff]")


@dataclass(frozen=True)
class Fingerprint:
    """What marks a family's text: its six-word runs, and its identifiers indexed by their first token (each
    with its token run and the exact pattern that confirms it in the text)."""

    family: str
    split: str
    shingles: frozenset[tuple[str, ...]]  # all of one length
    identifiers: dict[str, list[tuple[str, tuple[str, ...], re.Pattern[str]]]]


def words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def shingles_of(text: str, size: int) -> set[tuple[str, ...]]:
    tokens = words(text)
    return {tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)}


def family_texts(family: Family) -> list[str]:
    """Every sentence a family's writer wrote: description, conventions, prompts, feedback."""
    texts = [family.description, family.company]
    for convention in family.conventions.values():
        texts += [convention.title, convention.oracle]
    for task in family.tasks:
        texts.append(task.prompt)
        texts += [task.feedback_text(style) for style in task.feedback]
    return [t for t in texts if t]


def _columns(path: Path) -> list[str]:
    if path.suffix.lower() in {".csv", ".tsv"}:
        with path.open(encoding="utf-8", errors="replace") as handle:
            first = handle.readline()
        delimiter = "\t" if path.suffix.lower() == ".tsv" else (";" if first.count(";") > first.count(",") else ",")
        return next(csv.reader([first], delimiter=delimiter), [])
    if path.suffix.lower() in {".jsonl", ".json"}:
        try:
            line = path.read_text(encoding="utf-8").lstrip().splitlines()[0]
            row = json.loads(line)
        except (ValueError, IndexError):
            return []
        return list(row) if isinstance(row, dict) else []
    return []


#: A date or a period (`2024-03-10`, `2024-Q1`): any calendar names these, they identify no family.
_PERIOD = re.compile(r"\d{4}(?:[-/.]\d{1,2}){1,2}|\d{4}-?[QH]\d|[QH]\d-?\d{4}", re.IGNORECASE)


def _answer_values(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _answer_values(item)
    elif isinstance(value, list):
        for item in value:
            yield from _answer_values(item)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        digits = re.sub(r"\D", "", f"{value}".rstrip("0").rstrip(".")).lstrip("0")
        if len(digits) >= 4 or (isinstance(value, int) and len(digits) >= 5):
            yield f"{value}"
    elif isinstance(value, str) and len(value.strip()) >= 6 and not _PERIOD.fullmatch(value.strip()):
        yield value.strip()


def _token_pattern(text: str) -> re.Pattern[str]:
    """`text` as a whole token (not inside a longer identifier or number)."""
    return re.compile(rf"(?<![\w.]){re.escape(text)}(?![\w]|\.\d)", re.IGNORECASE)


def identifiers_of(family: Family) -> dict[str, re.Pattern[str]]:
    """The identifiers a family defines (module docstring), each with the pattern that finds it."""
    out: dict[str, re.Pattern[str]] = {}
    company = family.company.strip()
    if company:
        out[company] = _token_pattern(company)
        first = re.split(r"[\s'’]+", company)[0]
        if len(first) >= 4 and first.casefold() not in _GENERIC:
            out[first] = _token_pattern(first)
    for name in {f for task in family.tasks for f in task.files}:
        out[name] = _token_pattern(name)
        stem = Path(name).stem
        if "_" in stem or "-" in stem:
            out[stem] = _token_pattern(stem)
    for path in sorted(family.data_dir.glob("*")):
        for column in _columns(path):
            column = column.strip()
            # a column of three or more parts, or with a digit, is the family's own (`unit_price_gbp`,
            # `temp_c10`); two plain words (`order_id`, `unit_price`) name what any table may hold
            parts = column.split("_")
            compound = re.fullmatch(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+", column) is not None
            if compound and (len(parts) >= 3 or re.search(r"\d", column)):
                out[column] = _token_pattern(column)
    prefixes = {t.id.rsplit("-", 1)[0] for t in family.tasks if "-" in t.id}
    for prefix in prefixes:
        out[f"{prefix}-<n>"] = re.compile(rf"(?<![\w-]){re.escape(prefix)}-\d+\b", re.IGNORECASE)
    for task in family.tasks:
        for value in (*_answer_values(task.expected), *_answer_values(task.naive)):
            out[value] = _token_pattern(value)
    return out


def fingerprint(family: Family, size: int = SHINGLE) -> Fingerprint:
    shingles: set[tuple[str, ...]] = set()
    for text in family_texts(family):
        shingles |= shingles_of(text, size)
    index: dict[str, list[tuple[str, tuple[str, ...], re.Pattern[str]]]] = {}
    for label, pattern in identifiers_of(family).items():
        tokens = tuple(_TOKEN.findall(label.replace("<n>", "0").casefold()))
        if label.endswith("-<n>"):
            tokens = tokens[:-1]  # a task id: its prefix token, any number after it
        if tokens:
            index.setdefault(tokens[0], []).append((label, tokens, pattern))
    return Fingerprint(family.name, family.split, frozenset(shingles), index)


def files_under(paths: Iterable[Path]) -> Iterator[Path]:
    for root in paths:
        if root.is_file():
            yield root
            continue
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "node_modules" not in path.parts:
                yield path


def scan_text(text: str, where: str, prints: Sequence[Fingerprint]) -> list[Hit]:
    """Every family quote in one file's text."""
    hits: list[Hit] = []
    # a quote may wrap over lines (a docstring): runs are taken over the file's words, each word knowing its line
    flat: list[str] = []
    line_of: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        tokens = words(line)
        flat += tokens
        line_of += [number] * len(tokens)
    runs: dict[tuple[str, ...], int] = {}
    for size in {len(next(iter(fp.shingles))) for fp in prints if fp.shingles}:
        for i in range(len(flat) - size + 1):
            runs.setdefault(tuple(flat[i : i + size]), line_of[i])  # where a repeated run first occurs
    lowered = text.casefold()
    spans = [(m.group(0), m.start()) for m in _TOKEN.finditer(lowered)]
    for fp in prints:
        for run in runs.keys() & fp.shingles:
            hits.append(Hit(where, runs[run], "shingle", " ".join(run), fp.family, fp.split))
        for i, (token, start) in enumerate(spans):
            for label, wanted, pattern in fp.identifiers.get(token, ()):
                if tuple(t for t, _ in spans[i : i + len(wanted)]) != wanted:
                    continue
                if pattern.match(text, start) is None and pattern.match(text, max(0, start - 1)) is None:
                    continue
                number = text.count("\n", 0, start) + 1
                hits.append(Hit(where, number, "identifier", label, fp.family, fp.split))
    return hits


def scan(paths: Iterable[Path], families: Sequence[Family], root: Path = ROOT, size: int = SHINGLE) -> list[Hit]:
    prints = [fingerprint(family, size) for family in families]
    hits: list[Hit] = []
    for path in files_under(paths):
        if FAMILIES in path.parents:
            continue  # the corpus itself
        text = path.read_text(encoding="utf-8", errors="replace")
        where = str(path.relative_to(root)) if root in path.parents else str(path)
        hits += scan_text(text, where, prints)
    return sorted(hits, key=lambda h: (h.path, h.line, h.family, h.text))


def family_quotes_in_product(root: Path = ROOT) -> list[Hit]:
    """Quotes of any family in the product (`memos_bridge/`, `adapters/`)."""
    return scan([root / "memos_bridge", root / "adapters"], load_corpus(), root)


def held_out_quotes_in_tests(root: Path = ROOT) -> list[Hit]:
    """Quotes of a held-out family (`report`, `fresh`) in `tests/`."""
    held_out = [f for f in load_corpus() if f.split in ("report", "fresh")]
    return scan([root / "tests"], held_out, root, TEST_SHINGLE)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    hits = family_quotes_in_product() + held_out_quotes_in_tests()
    for hit in hits:
        print(hit)
    print(f"{len(hits)} quotes of task families", file=sys.stderr)
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
