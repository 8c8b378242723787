"""English verbs the lesson rules recognise: imperatives (what an instruction starts with) and the verbs that
state how things are. Word lists of the language, not of any task; shared by the sentence classifier, the
instance filter and the world-model phrasing.
"""

from __future__ import annotations

import re
from typing import Final

#: Common imperative verbs (the first word of an instruction).
VERBS: Final = frozenset(
    """
    add aggregate align append apply ask assert assume avoid backup build bump calculate call cap cast change check
    clean clear clone close collect combine commit compare compile compute configure confirm convert copy count
    create debug decode deduplicate dedupe define delete deploy detect disable divide document double download drop
    edit emit enable encode ensure escape exclude execute expand export extract fetch filter find fix flatten follow
    format generate get give group handle identify ignore import include inspect install interpret join keep label
    leave limit list load locate log look lowercase make map mark match measure merge migrate mock move multiply name
    normalise normalize note open order output pad paginate parse pass patch pick pin pipe place prefer prefix
    prepend print process provide pull push put quote read rebase rebuild record recompute reduce refresh reload
    remove rename render reorder repeat replace report request rerun reset resolve restart restore retry return
    reuse review rewrite round run save scale scan search select send separate set shift show skip sort specify
    split start stick stop store strip submit subtract sum supply switch tag take test track transform translate
    treat trim truncate try type uninstall unpack update upgrade upload uppercase use validate verify wait watch
    wrap write zip
    """.split()
)
#: Lemmas of verbs that state how things are ("gives", "holds", "means", "counts"), besides the imperatives.
STATE_LEMMAS: Final = frozenset(
    """accept allow appear apply belong bill carry cause charge contain cost count cover denote depend describe differ
    end exist expect expose give hold include inherit exclude indicate lead mean need omit precede produce record
    reject represent require return signal stay start store take use vary waive write yield""".split()
)
AUXILIARIES: Final = frozenset(
    """is are was were be been being am has have had does do did can cannot could will would may might must shall
    should""".split()
)


def inflections(word: str) -> set[str]:
    """The lemmas a word may be an inflection of ("gives" → give, "matches" → match, "carried" → carry)."""
    word = word.lower()
    forms = {word}
    if word.endswith("ies"):
        forms.add(word[:-3] + "y")
    if word.endswith("es"):
        forms.add(word[:-2])
    if word.endswith("s"):
        forms.add(word[:-1])
    if word.endswith("ied"):
        forms.add(word[:-3] + "y")
    if word.endswith("ed"):
        forms.update({word[:-2], word[:-1]})
    if word.endswith("ing"):
        forms.update({word[:-3], word[:-3] + "e"})
    return forms


_WORD: Final = re.compile(r"[A-Za-z][A-Za-z'-]*")


def has_verb(text: str) -> bool:
    """Whether `text` holds a verb: an auxiliary, or an inflection of a known verb (Chinese text counts as having
    one: it has no inflections to tell by)."""
    if re.search(r"[\u4e00-\u9fff]", text):
        return True
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if word in AUXILIARIES or inflections(word) & (VERBS | STATE_LEMMAS):
            return True
    return False
