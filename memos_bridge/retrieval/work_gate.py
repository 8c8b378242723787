"""Which recalled lessons are about the work a request asks for.

A lesson holds for the work it was learnt on: one system's records, one project's files. A request often names
neither (“how many scans were refused on Saturday?”), and the lesson's own words are about data every project has
("times", "readings", "amounts"), so neither the request's words nor the lesson's say whose lesson it is. What does
is the request it was learnt on: a lesson keeps those requests as vectors (`ExperienceSnippet.contexts`), and
requests of one piece of work are close in meaning (`rules.work`).

The gate groups the recalled lessons into works — two lessons are of one work when one of the requests the one
was learnt on is close to one of the other's, or when they were learnt on the same files (named in their terms,
or read by the tool calls of the episodes they were learnt on) — and keeps the works
whose closest request is close to this request and about as close as the closest work's (`WORK_MARGIN`). So the
sibling lessons of the closest work come back together, although each was learnt on another task of it, and a
look-alike request of another project does not bring that project's lessons. On top of that:

* learnt in this very session (a host session is usually one piece of work), a lesson needs only
  `SESSION_SIMILARITY`;
* a request that names files or a company that a lesson's work does not name is about another subject: the lesson
  stays out unless it came from this session; when some recalled lessons were learnt on the request's files, a
  lesson learnt on requests that named no file comes back only when it is of their work;
* a lesson whose terms the request names (a field, a flag, a code) comes back when the request is at least
  `NAMED_SIMILARITY` close to its work and that work is not far below the closest (`NAMED_MARGIN`);
* a lesson whose work names the company the request names is a convention of that house, which holds for all of
  its files: it comes back at `NAMED_SIMILARITY`, however much closer another of the house's works is (a rule
  learnt on one of its logs is the rule of its other logs; the margin would keep only the closest log's);
* a lesson learnt in the project workspace the request acts in (a host that names its project folder, as the MCP
  server and the hooks do) is that project's convention: the workspace has already told whose lesson it is, so
  it comes back at `PROJECT_SIMILARITY`, whichever of the project's files either was about. Which of the
  project's lessons bear on the task is left to the scope gate and the ranking.

Pure: the caller hands in the lessons' vectors and terms.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from memos_bridge.rules.groups import Groups
from memos_bridge.rules.subjects import FILE, owner_names, same_inputs
from memos_bridge.rules.work import SAME_WORK_SIMILARITY

#: A work comes back when its closest request is at least this close …
WORK_SIMILARITY: Final = SAME_WORK_SIMILARITY
#: … and no more than this below the closest work's.
WORK_MARGIN: Final = 0.08
#: A lesson learnt in the same session comes back at this closeness.
SESSION_SIMILARITY: Final = 0.35
#: A lesson whose terms the request names comes back at this closeness, its work within `NAMED_MARGIN`.
NAMED_SIMILARITY: Final = 0.45
NAMED_MARGIN: Final = 0.2
#: Two lessons whose episodes read different input files are of one work by their requests only at this closeness:
#: sibling tasks of one system on two of its files are asked about in closer words than look-alike tasks of two
#: projects (two projects' "how many … on Sunday" questions over their own logs measured 0.6–0.7 on dev).
APART_SIMILARITY: Final = 0.7
#: Two lessons whose episodes read a file of the same name are of one work when their requests are at least this
#: close (one project's tasks on its file; another project's file of the same name is asked about in other words).
INPUT_WORK_SIMILARITY: Final = 0.45
#: A lesson of the request's own project workspace comes back at this closeness: only a floor against requests
#: about something else entirely (a project's tasks on its other files measured as low as 0.15–0.25 on dev, and
#: 0.25 lost 8 of 1,085 needed lessons there; which of the project's lessons bear on a task is the scope gate's).
PROJECT_SIMILARITY: Final = 0.15


@dataclass
class LessonView:
    """What the gate knows of one recalled lesson."""

    ref_id: str
    contexts: list[np.ndarray]
    terms: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    #: whether the request names one of its terms (the caller's test: `rules.subjects.mentions`)
    named: bool = False
    #: the files the episodes it was learnt on worked on (read by their tool calls)
    inputs: list[str] = field(default_factory=list)
    #: whether it was learnt in the project workspace the request acts in
    project: bool = False


@dataclass(frozen=True)
class RequestView:
    vector: np.ndarray
    text: str
    session_id: str | None = None
    #: the files the request is about (not the ones it asks to be written)
    files: Sequence[str] = ()


def select(lessons: Sequence[LessonView], request: RequestView) -> set[str]:
    """The ids of the lessons about the request's work (module docstring)."""
    if not lessons:
        return set()
    closeness = [_closest(request.vector, lesson.contexts) for lesson in lessons]
    works = _works(lessons)
    work_best: dict[int, float] = {}
    for index, work in enumerate(works):
        work_best[work] = max(work_best.get(work, -1.0), closeness[index])
    best = max(work_best.values())
    companies = {name.casefold() for name in owner_names(request.text)}
    work_companies: dict[int, set[str]] = {}
    for index, lesson in enumerate(lessons):
        work_companies.setdefault(works[index], set()).update(_companies(lesson))
    # the works the request's own files point to: a lesson learnt on requests that named no file must be of one
    anchored = {
        works[i]
        for i, lesson in enumerate(lessons)
        if request.files and _files(lesson.terms) and same_inputs(_files(lesson.terms), request.files)
    }
    kept: set[str] = set()
    for index, lesson in enumerate(lessons):
        close = closeness[index]
        own_work = work_best[works[index]]
        this_session = bool(request.session_id) and request.session_id in lesson.sessions
        if this_session and close >= SESSION_SIMILARITY:
            kept.add(lesson.ref_id)
            continue
        if lesson.project:
            if close >= PROJECT_SIMILARITY:
                kept.add(lesson.ref_id)
            continue
        if anchored and not _files(lesson.terms) and works[index] not in anchored:
            continue  # the request names its files, and they are another work's than this nameless lesson's
        if _other_subject(lesson, request, companies, work_companies[works[index]]):
            continue
        house = _names_a_house(request.text, work_companies[works[index]])
        if (
            (own_work >= WORK_SIMILARITY and own_work >= best - WORK_MARGIN)
            or (lesson.named and own_work >= NAMED_SIMILARITY and own_work >= best - NAMED_MARGIN)
            or (house and own_work >= NAMED_SIMILARITY)
        ):
            kept.add(lesson.ref_id)
    return kept


def _closest(vector: np.ndarray, contexts: Sequence[np.ndarray]) -> float:
    return max((float(np.dot(vector, context)) for context in contexts), default=-1.0)


def _works(lessons: Sequence[LessonView]) -> list[int]:
    """The work of each lesson (an index shared by the lessons of one work): lessons are joined when two of their
    requests are close (`SAME_WORK_SIMILARITY`; `APART_SIMILARITY` when their episodes read other input files) or
    their files say they are about the same inputs; never when both were learnt on files and the files differ
    (requests in one harness's words look alike across work)."""
    groups = Groups(len(lessons))
    files = [_files(lesson.terms) for lesson in lessons]

    def other_files(i: int, j: int) -> bool:  # learnt on different files: different work, however alike the words
        return bool(files[i] and files[j]) and not same_inputs(files[i], files[j])

    inputs = [lesson.inputs for lesson in lessons]
    owners = [i for i, lesson in enumerate(lessons) for _ in lesson.contexts]
    near = np.full((len(lessons), len(lessons)), -1.0)  # the closest pair of requests of two lessons
    if owners:
        matrix = np.stack([context for lesson in lessons for context in lesson.contexts])
        similarity = matrix @ matrix.T
        index = np.asarray(owners)
        np.maximum.at(near, (index[:, None], index[None, :]), similarity)
        close = similarity >= SAME_WORK_SIMILARITY
        for a, b in zip(*np.nonzero(close), strict=True):
            i, j = owners[a], owners[b]
            if i == j or other_files(i, j):
                continue
            if (
                inputs[i]
                and inputs[j]
                and not _shared_file(inputs[i], inputs[j])
                and similarity[a, b] < APART_SIMILARITY
            ):
                continue  # learnt on other input files: alike requests of two projects
            groups.join(i, j)
    for i in range(len(lessons)):
        for j in range(i + 1, len(lessons)):
            if files[i] and files[j] and not other_files(i, j):
                groups.join(i, j)
            elif not other_files(i, j) and _shared_file(inputs[i], inputs[j]) and near[i, j] >= INPUT_WORK_SIMILARITY:
                groups.join(i, j)  # learnt on the very same input file, by requests of one domain
    return groups.labels()


def _shared_file(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether two lessons' episodes read a file of the same name (the name itself: a sibling file of another
    export, which `same_inputs` accepts for the files a request names, may be another project's)."""
    return bool({name.casefold() for name in a} & {name.casefold() for name in b})


def _files(terms: Sequence[str]) -> list[str]:
    return [term for term in terms if FILE.fullmatch(term)]


def _companies(lesson: LessonView) -> set[str]:
    return {term.casefold() for term in lesson.terms if _is_company(term)}


def _other_subject(lesson: LessonView, request: RequestView, companies: set[str], work_companies: set[str]) -> bool:
    """Whether the request names files or a company, and the lesson's work names others (and none of these). A
    company both name makes them one house, whatever its files; a name the request shares with another lesson of
    the same work does too (a name may be a place or an item in one data set: two lessons learnt on the same
    records, one on a request naming one of its depots and one naming another, are of one work); otherwise files
    decide when both name some (a request about one house's files may also name a customer of that house)."""
    if companies & work_companies or _names_a_house(request.text, work_companies):
        return False  # one house (the work's names include the lesson's own): its conventions hold for all its files
    theirs = _files(lesson.terms)
    if request.files and theirs:  # files decide when both sides name some (a request may also name a customer)
        return not same_inputs(theirs, request.files)
    return bool(companies and _companies(lesson))


def _names_a_house(text: str, companies: set[str]) -> bool:
    """Whether `text` names one of `companies` (case-folded names): in full, or by its first word written as a
    name ("the Calloway depot log" names "Calloway Timber"; a house is often called by its first name alone)."""
    folded = text.casefold()
    for company in companies:
        if company in folded:
            return True
        first = company.split()[0]
        if len(first) >= 4 and any(m.group(0)[:1].isupper() for m in _as_a_word(first).finditer(text)):
            return True
    return False


@functools.lru_cache(maxsize=512)
def _as_a_word(word: str) -> re.Pattern[str]:
    """`word` standing alone, in any case (compiled once: the same houses come back turn after turn)."""
    return re.compile(rf"(?<![\w-]){re.escape(word)}(?![\w-])", re.IGNORECASE)


def _is_company(term: str) -> bool:
    return bool(owner_names(term)) and owner_names(term)[0] == term
