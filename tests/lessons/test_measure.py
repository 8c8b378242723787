"""The evaluation's judge: what counts as an injected text carrying a lesson."""

from __future__ import annotations

from pathlib import Path

from lessons.corpus import Convention, Family, Task
from lessons.evaluate import lesson_words, measure

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


def _family(name: str, *conventions: Convention) -> Family:
    return Family(name, "dev", "units and scales", name.title(), "", {c.id: c for c in conventions}, (), Path("."))


def test_another_familys_lesson_counts_only_in_an_item_that_carries_none_of_this_familys() -> None:
    """Two families with a convention in cents: this family's own cents lesson is not another family's lesson;
    an item that carries only the other family's lesson is."""
    mine = _family("ledger", Convention("fee", "fees in cents", "fees are cents", (r"\bfee", r"\bcents?\b")))
    theirs = _family("tolls", Convention("toll", "tolls in cents", "tolls are cents", (r"\bcents?\b",)))
    task = Task("lg-2", "Average fee in euros?", (), "answer.json", ("fee",), {"avg": 12.5}, {"avg": 1250}, 0.01, {})
    taught = {"ledger": {"fee"}, "tolls": {"toll"}}
    earlier = [(mine, task), (theirs, task)]
    own_only = "- The fee column is in cents: divide by 100."
    record = measure(mine, task, "terse", own_only, taught, earlier, "", "")
    assert record.recalled == ["fee"] and record.unrelated == []
    with_other = own_only + "\n- Toll amounts are in cents too."
    assert measure(mine, task, "terse", with_other, taught, earlier, "", "").unrelated == ["tolls/toll"]


def test_the_time_stamp_the_service_puts_on_a_past_step_is_not_a_lesson() -> None:
    clock = Convention("hmm", "H:MM", "durations as H:MM", (r"\b\d:\d\d\b",))
    assert not clock.carried_by(lesson_words("1. [2023-11-22 07:29 UTC] id=tr_7Y8XX8P7TE4D"))
