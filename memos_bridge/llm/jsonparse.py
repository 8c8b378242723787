"""Tolerant extraction of JSON values from model text.

Models asked for "JSON only" still wrap it: a `<think>` block first, a sentence of prose, a ```json fence,
a trailing comma, Python-style single quotes or `True`/`None`. Rejecting those answers would waste a paid
call and push the caller onto its fallback for no good reason, so this module recovers the value when it
can do so *without guessing*: it only repairs spellings whose meaning is unambiguous, and it never invents
keys or closes an unterminated value. Schema validation is the caller's job (pydantic, in the facade);
this module only turns text into candidate Python values, best candidates first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Final

#: Text beyond this is ignored: a JSON answer never needs it, and the scan stays linear and cheap.
MAX_SCAN_CHARS: Final = 100_000
#: How many closed bracket pairs are parsed before giving up (bounds the work on bracket-heavy prose).
MAX_START_POSITIONS: Final = 64

_THINK_BLOCK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think(?:ing)?>", re.IGNORECASE)
_FENCED = re.compile(r"```[ \t]*(?:json5?|javascript|js)?[ \t]*\r?\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_PY_LITERALS: Final = {"True": "true", "False": "false", "None": "null"}


class JsonExtractError(ValueError):
    """No JSON value could be recovered from the text."""


def strip_think(text: str) -> str:
    """Drop reasoning blocks (`<think>…</think>`) that reasoning models print before the answer.

    An unterminated `<think>` (the model ran out of tokens while thinking) leaves nothing usable after it,
    so everything from the tag on is dropped.
    """
    text = _THINK_BLOCK.sub("", text)
    match = _THINK_OPEN.search(text)
    return text[: match.start()] if match else text


def _opens_single_quoted(text: str, index: int) -> bool:
    """Whether the `'` at `index` can open a string: it follows `{`, `[`, `,` or `:` (apostrophes in words do not)."""
    before = index - 1
    while before >= 0 and text[before].isspace():
        before -= 1
    return before >= 0 and text[before] in "{[,:"


def _matching_brackets(text: str) -> dict[int, int]:
    """For every `{` / `[` that is properly closed: its index → the index just past its closing bracket.

    One linear pass. Quotes are tracked only inside brackets (prose between values is free text), and a
    mismatched closer discards the open brackets before it, so a broken value cannot hide a good one after it.
    """
    closers = {"{": "}", "[": "]"}
    matches: dict[int, int] = {}
    stack: list[int] = []
    quote: str | None = None
    escaped = False
    for index, char in enumerate(text):
        if quote is not None:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = None
            continue
        if stack and (char == '"' or (char == "'" and _opens_single_quoted(text, index))):
            quote = char
        elif char in closers:
            stack.append(index)
        elif char in "}]":
            if stack and closers[text[stack[-1]]] == char:
                matches[stack.pop()] = index + 1
            else:
                stack.clear()
    return matches


def repair(segment: str) -> str:
    """Rewrite the unambiguous non-JSON spellings of one bracketed segment into JSON.

    * trailing commas before `}` / `]` are removed;
    * single-quoted strings become double-quoted when they contain no double quote (otherwise the quoting
      would have to be re-escaped, and a wrong guess would change the value, so they are left alone and
      the parse fails);
    * bare `True` / `False` / `None` become `true` / `false` / `null`.
    Text inside double-quoted strings is never touched.
    """
    out: list[str] = []
    index = 0
    length = len(segment)
    while index < length:
        char = segment[index]
        if char == '"':
            end = _string_end(segment, index, '"')
            out.append(segment[index:end])
            index = end
        elif char == "'":
            end = _string_end(segment, index, "'")
            body = segment[index + 1 : end - 1] if end - index >= 2 and segment[end - 1] == "'" else None
            if body is not None and '"' not in body:
                out.append('"' + body.replace("\\'", "'") + '"')
            else:
                out.append(segment[index:end])
            index = end
        elif char == ",":
            ahead = index + 1
            while ahead < length and segment[ahead].isspace():
                ahead += 1
            if ahead < length and segment[ahead] in "}]":
                index += 1  # drop the trailing comma
            else:
                out.append(char)
                index += 1
        elif char.isalpha():
            ahead = index
            while ahead < length and (segment[ahead].isalnum() or segment[ahead] == "_"):
                ahead += 1
            word = segment[index:ahead]
            out.append(_PY_LITERALS.get(word, word))
            index = ahead
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _string_end(text: str, start: int, quote: str) -> int:
    """Index just past the closing `quote` of the string opened at `start` (or the end of the text)."""
    index = start + 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == quote:
            return index + 1
        index += 1
    return len(text)


def _load(segment: str) -> tuple[bool, Any]:
    """Parse `segment` as JSON, then as repaired JSON; (ok, value)."""
    for attempt in (segment, None):
        candidate = repair(segment) if attempt is None else attempt
        try:
            return True, json.loads(candidate)
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
            continue
    return False, None


def _scan(text: str) -> Iterator[Any]:
    """Every parseable bracketed value in `text`, left to right, skipping values nested in earlier ones."""
    position = 0
    tried = 0
    for start, end in sorted(_matching_brackets(text).items()):
        if start < position:
            continue
        if tried >= MAX_START_POSITIONS:
            return
        tried += 1
        ok, value = _load(text[start:end])
        if ok:
            yield value
            position = end


def iter_json_values(text: str) -> Iterator[Any]:
    """Candidate JSON values recovered from model text, most likely first.

    Order: the whole answer when it is JSON already, then the contents of code fences, then every
    balanced `{…}` / `[…]` found in the remaining prose. Scalars count only when they are the whole
    answer (a bare number in prose is not an answer). Duplicates are not filtered: the caller validates
    each candidate against its schema and keeps the first that fits.
    """
    cleaned = strip_think(text[:MAX_SCAN_CHARS]).strip()
    if not cleaned:
        return
    ok, value = _load(cleaned)
    if ok:
        yield value
        return
    fenced = [block.strip() for block in _FENCED.findall(cleaned)]
    for block in fenced:
        ok, value = _load(block)
        if ok:
            yield value
        else:
            yield from _scan(block)
    yield from _scan(_FENCED.sub(" ", cleaned) if fenced else cleaned)


def extract_json(text: str) -> Any:
    """The first JSON value recovered from `text`; raises JsonExtractError when there is none."""
    for value in iter_json_values(text):
        return value
    raise JsonExtractError("no JSON value found in the model output")


def extract_json_object(text: str) -> dict[str, Any]:
    """The first JSON *object* recovered from `text` (arrays and scalars are skipped)."""
    for value in iter_json_values(text):
        if isinstance(value, dict):
            return value
    raise JsonExtractError("no JSON object found in the model output")
