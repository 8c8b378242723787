"""The corpus firewall: product code quotes no task family (comments and docstrings included), the tests quote no
held-out family, and the firewall itself finds a planted quote (`scripts/lessons/firewall.py`)."""

from __future__ import annotations

from pathlib import Path

from lessons.corpus import load_corpus
from lessons.firewall import family_quotes_in_product, held_out_quotes_in_tests, scan, words


def test_product_code_quotes_no_task_family() -> None:
    hits = family_quotes_in_product()
    assert not hits, "\n".join(map(str, hits[:20]))


def test_the_tests_quote_no_held_out_family() -> None:
    hits = held_out_quotes_in_tests()
    # a held-out family's text is not printed here: only where the quote is and whose it is
    assert not hits, "\n".join(f"{h.path}:{h.line} quotes {h.family} ({h.split})" for h in hits[:20])


def _dev_family():  # type: ignore[no-untyped-def]
    return next(f for f in load_corpus(split="dev") if f.company and len(words(f.tasks[0].prompt)) >= 8)


def test_a_planted_family_sentence_is_found(tmp_path: Path) -> None:
    family = _dev_family()
    prompt = " ".join(words(family.tasks[0].prompt)[:7])
    planted = tmp_path / "planted.py"
    planted.write_text(f'"""An example:\n{prompt}\n"""\nX = 1\n', encoding="utf-8")
    hits = scan([tmp_path], [family], root=tmp_path)
    assert any(h.kind == "shingle" and h.family == family.name and h.line == 2 for h in hits), hits


def test_a_planted_identifier_is_found_and_a_neutral_text_is_not(tmp_path: Path) -> None:
    family = _dev_family()
    task = family.tasks[0]
    prefix = task.id.rsplit("-", 1)[0]
    (tmp_path / "ids.py").write_text(
        f"# what {family.company} asked in {prefix}-9\nFILE = {task.files[0]!r}\n", encoding="utf-8"
    )
    (tmp_path / "neutral.py").write_text(
        '"""Sum the order totals of one region and write them to a file."""\nN = 3\n', encoding="utf-8"
    )
    hits = scan([tmp_path], [family], root=tmp_path)
    found = {(h.path, h.text) for h in hits if h.kind == "identifier"}
    assert ("ids.py", family.company) in found
    assert ("ids.py", f"{prefix}-<n>") in found
    assert ("ids.py", task.files[0]) in found
    assert not [h for h in hits if h.path == "neutral.py"], hits
