"""Prefixed, time-ordered identifiers (`tr_…`, `ep_…`, …).

Ids are a kind prefix plus 12 Crockford base32 characters: 6 characters of millisecond time (so ids of one
kind sort roughly by creation) and 6 of randomness. They are short enough to quote in an injected block and
to type into a `memos_get` tool call.
"""

from __future__ import annotations

import secrets
import time

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

PREFIXES = {
    "session": "se_",
    "episode": "ep_",
    "trace": "tr_",
    "policy": "po_",
    "world_model": "wm_",
    "skill": "sk_",
    "memory": "me_",
    "feedback": "fb_",
    "repair": "dr_",
    "trial": "st_",
}


def _b32(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        chars.append(CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(kind: str) -> str:
    """Mint a new id for `kind` (a key of PREFIXES)."""
    prefix = PREFIXES[kind]
    millis = int(time.time() * 1000) & ((1 << 30) - 1)
    return prefix + _b32(millis, 6) + _b32(secrets.randbits(30), 6)
