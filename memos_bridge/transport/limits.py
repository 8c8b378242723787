"""What a request may carry, checked once per request before any method runs.

JSON allows values that nothing behind the transport can hold: numbers beyond every database's integer
range (`2^63`, `1e30`) or beyond any float (`1e999` parses as infinity), strings with unpaired UTF-16
surrogates (`"\\udc80"` is legal JSON text but has no UTF-8 form, so SQLite, the tokenizer and the log
cannot store it), and nesting deep enough to exhaust the stack. Letting them through turned into `internal`
errors deep in storage, or into a reply that could not be encoded — no reply at all. Rejecting them here,
with the path to the offending value, gives the client a -32602 it can act on, for every method at once.

Numbers are bounded to the range a JSON number keeps exactly in every language (±2^53): ids, timestamps in
milliseconds, offsets, counts, scores and magnitudes all fit with room to spare.
"""

from __future__ import annotations

import math
import re
from typing import Any

MAX_SAFE_INT = 2**53
MAX_DEPTH = 64
MAX_ITEMS = 10_000  # elements of one array or members of one object
MAX_INT_DIGITS = 400  # a literal longer than this is refused while parsing (CPython's own cap is 4300)
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadValue(ValueError):
    """A value the service cannot hold; `path` locates it (`params.toolCalls.0.output`)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


def parse_int(literal: str) -> int:
    """`json.loads(parse_int=…)`: refuse absurdly long literals before converting them (quadratic in CPython)."""
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer literal of {len(literal)} digits")
    return int(literal)


def check_value(value: Any, path: str = "params", depth: int = 0) -> None:
    """Raise BadValue for the first value in `value` that the service cannot hold (module docstring)."""
    if depth > MAX_DEPTH:
        raise BadValue(path, f"nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if kind is str:
        if _SURROGATE.search(value):
            raise BadValue(path, "string holds an unpaired UTF-16 surrogate (not valid Unicode text)")
    elif kind is int:
        if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            raise BadValue(path, f"integer out of range (at most ±2^53 = {MAX_SAFE_INT})")
    elif kind is float:
        if not math.isfinite(value) or abs(value) > MAX_SAFE_INT:
            raise BadValue(path, f"number out of range (at most ±2^53 = {MAX_SAFE_INT})")
    elif kind is dict:
        if len(value) > MAX_ITEMS:
            raise BadValue(path, f"object with more than {MAX_ITEMS} members")
        for key, item in value.items():
            if _SURROGATE.search(key):
                raise BadValue(f"{path}.{_printable(key)}", "key holds an unpaired UTF-16 surrogate")
            check_value(item, f"{path}.{key}", depth + 1)
    elif kind is list:
        if len(value) > MAX_ITEMS:
            raise BadValue(path, f"array with more than {MAX_ITEMS} items")
        for index, item in enumerate(value):
            check_value(item, f"{path}.{index}", depth + 1)


def valid_id(value: Any) -> bool:
    """A request id this service echoes back: a string of valid text, a safe integer, a finite number or null."""
    kind = type(value)
    if value is None:
        return True
    if isinstance(value, str) and kind is str:
        return len(value) <= 1024 and not _SURROGATE.search(value)
    if isinstance(value, int) and kind is int:
        return -MAX_SAFE_INT <= value <= MAX_SAFE_INT
    if isinstance(value, float) and kind is float:
        return bool(math.isfinite(value) and abs(value) <= MAX_SAFE_INT)
    return False


def _printable(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)[:200]
