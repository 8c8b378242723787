"""The evaluation's judge: what counts as an injected text carrying a lesson."""

from __future__ import annotations

from lessons.corpus import Convention
from lessons.evaluate import lesson_words

from memos_bridge.ids import CROCKFORD, PREFIXES, new_id

# A key term of the shape corpora use ("a digit then a letter at the end of a word", for channel suffixes such
# as 12a / 12b) and a common word that any Chinese lesson may hold.
SUFFIX_CHANNEL = Convention(
    id="channel", title="channels", oracle="12a and 12b are one analyser", key_terms=(r"(?<=\d)[ab]\b", "同一")
)


def test_a_service_id_in_a_provenance_line_is_not_a_lesson() -> None:
    # an id whose random tail ends in a digit and B: the key term would match it, case-insensitively
    line = "   Scope: From user feedback fb_3SJWG10TWD9B (episode ep_3SJWDZC8GJ6C). 同一个文件里的数值都要检查。"
    assert SUFFIX_CHANNEL.carried_by(line)  # the raw text fools the key terms …
    assert not SUFFIX_CHANNEL.carried_by(lesson_words(line))  # … the judged words do not
    # the lesson itself, beside an id, still counts
    assert SUFFIX_CHANNEL.carried_by(lesson_words(line + " 12a 和 12b 是同一台仪器"))


def test_every_kind_of_service_id_is_stripped_and_nothing_else() -> None:
    for kind in PREFIXES:
        minted = new_id(kind)
        assert minted not in lesson_words(f"see {minted} here"), minted
    tail = CROCKFORD[-12:]
    # field names and look-alikes (lower case, one character too many, an unknown prefix) are not ids
    for word in ("water_ml", "released_at", f"fb_{tail.lower()}", f"fb_{tail}X", f"zz_{tail}"):
        assert word in lesson_words(f"use {word} here"), word
