"""The work gate: recalled lessons come back for the work they were learnt on, judged by the requests they were
learnt on (synthetic unit vectors stand in for the model's)."""

from __future__ import annotations

import numpy as np

from memos_bridge.retrieval.work_gate import LessonView, RequestView, select


def unit(*weights: float) -> np.ndarray:
    vec = np.zeros(8, dtype=np.float32)
    vec[: len(weights)] = weights
    return vec / np.linalg.norm(vec)


# three kinds of work: each request of one work is close to the others of it
GATES_A, GATES_B = unit(1, 0.3, 0, 0), unit(1, 0, 0.3, 0)
WEIGH_A = unit(0, 0, 0.2, 1)
REQUEST = RequestView(unit(1, 0.15, 0.15, 0), "How many scans on Saturday?")


def test_the_lessons_of_the_closest_work_come_back_together_and_other_work_stays_out() -> None:
    lessons = [
        LessonView("po_clock", [GATES_A]),
        LessonView("po_refused", [GATES_B]),  # learnt on a sibling task: joined through the work
        LessonView("po_weigh", [WEIGH_A]),
    ]
    assert select(lessons, REQUEST) == {"po_clock", "po_refused"}


def test_a_look_alike_request_of_other_work_below_the_margin_brings_nothing() -> None:
    request = RequestView(unit(1, 0, 0), "How many scans on Saturday?")
    own = unit(0.75, 0.66, 0)  # 0.75 from the request
    other = unit(0.62, -0.3, 0.725)  # 0.62: close enough alone, but far from the own work and below its margin
    lessons = [LessonView("po_own", [own]), LessonView("po_other", [other])]
    assert select(lessons, request) == {"po_own"}
    assert select([LessonView("po_other", [other])], request) == {"po_other"}  # alone, it is the closest work


def test_nothing_comes_back_when_no_work_is_close() -> None:
    assert select([LessonView("po_weigh", [WEIGH_A])], REQUEST) == set()


def test_a_request_naming_other_files_keeps_out_a_lesson_of_other_files_unless_learnt_in_this_session() -> None:
    lessons = [LessonView("po_a", [GATES_A], terms=["lift_scans_jan.csv"], sessions=["se_1"])]
    other_files = RequestView(REQUEST.vector, "Total of depot_log.csv", files=["depot_log.csv"])
    assert select(lessons, other_files) == set()
    sibling = RequestView(REQUEST.vector, "Total of lift_scans_feb.csv", files=["lift_scans_feb.csv"])
    assert select(lessons, sibling) == {"po_a"}
    same_session = RequestView(REQUEST.vector, "Total of depot_log.csv", "se_1", files=["depot_log.csv"])
    assert select(lessons, same_session) == {"po_a"}


def test_a_lesson_learnt_in_this_session_needs_less_closeness() -> None:
    loose = unit(1, 0, 0, 1.6)  # about 0.5 from the request
    lesson = LessonView("po_s", [loose], sessions=["se_9"])
    assert select([lesson], REQUEST) == set()
    assert select([lesson], RequestView(REQUEST.vector, REQUEST.text, "se_9")) == {"po_s"}


def test_a_lesson_whose_terms_the_request_names_needs_less_closeness() -> None:
    loose = unit(1, 0, 0, 1.4)
    assert select([LessonView("po_n", [loose])], REQUEST) == set()
    assert select([LessonView("po_n", [loose], named=True)], REQUEST) == {"po_n"}


def test_a_nameless_lesson_gives_way_to_the_work_the_requests_files_name() -> None:
    request = RequestView(unit(1, 0, 0), "How many visits in visits_2024.csv?", files=["visits_2024.csv"])
    own = LessonView("po_own", [unit(0.7, 0.714, 0)], terms=["visits_2024.csv"])  # 0.70, learnt on the file
    nameless = LessonView("po_nameless", [unit(0.75, 0, 0.66)])  # 0.75, on other work: 0.53 from the own work
    assert select([own, nameless], request) == {"po_own"}
    sibling = LessonView("po_sibling", [unit(0.8, 0.6, 0)])  # learnt on the same work without naming the file
    assert select([own, sibling], request) == {"po_own", "po_sibling"}
    assert select([nameless], request) == {"po_nameless"}  # nothing on the request's files: it may come back


def test_lessons_learnt_on_the_same_input_file_are_one_work_when_their_requests_are_of_one_domain() -> None:
    request = RequestView(unit(1, 0, 0), "Which pump ran longest in the readings log?")
    near = LessonView("po_near", [unit(0.8, 0.6, 0)], inputs=["pump_readings.csv"])  # 0.80 from the request
    # 0.62 from the request, far below the closest work, 0.50 from po_near's request: another work by meaning
    far = LessonView("po_far", [unit(0.62, 0, 0.785)], inputs=["pump_readings.csv"])
    assert select([near, far], request) == {"po_near", "po_far"}  # the same file read: one work
    elsewhere = LessonView("po_far", [unit(0.62, 0, 0.785)], inputs=["valve_checks.csv"])
    assert select([near, elsewhere], request) == {"po_near"}
    # a file of the same name asked about in unrelated words (another project's) does not join them
    unrelated = LessonView("po_unrelated", [unit(0.62, -0.78, 0.0)], inputs=["pump_readings.csv"])  # 0.03 from near
    assert select([near, unrelated], request) == {"po_near"}


def test_a_name_the_request_shares_with_one_lesson_of_a_work_vouches_for_the_others() -> None:
    request = RequestView(unit(1, 0, 0), "How many crates did the East Yard load?")
    # names in one data set (two yards) read as houses: alone, the other yard's lesson is another subject
    east = LessonView("po_east", [unit(0.9, 0.436, 0)], terms=["East Yard"], inputs=["crate_moves.csv"])
    west = LessonView("po_west", [unit(0.85, 0, 0.527)], terms=["West Yard"], inputs=["crate_moves.csv"])
    assert select([west], request) == set()
    assert select([east, west], request) == {"po_east", "po_west"}


def test_a_lesson_of_the_house_the_request_names_comes_back_for_its_other_files() -> None:
    # one house, two logs: a rule learnt on its door log holds for its till log, although the work learnt on the
    # till log itself is much closer to the request (the margin alone would keep only that one)
    request = RequestView(unit(1, 0, 0), "How many hours does the Ostrava till log span?", files=["till.log"])
    till = LessonView("po_till", [unit(0.95, 0.31, 0)], terms=["till.log", "Ostrava Retail"])
    door = LessonView("po_door", [unit(0.55, 0, 0.835)], terms=["door.log", "Ostrava Retail"])
    assert select([till, door], request) == {"po_till", "po_door"}  # named by its first name alone
    other_house = LessonView("po_other", [unit(0.55, 0, 0.835)], terms=["door.log", "Kelby Foods"])
    assert select([till, other_house], request) == {"po_till"}
    far = LessonView("po_far", [unit(0.3, 0, 0.954)], terms=["door.log", "Ostrava Retail"])  # 0.30: not of it
    assert select([till, far], request) == {"po_till"}


def test_alike_requests_of_lessons_learnt_on_other_input_files_join_only_when_close() -> None:
    request = RequestView(unit(1, 0, 0), "How many patients came on Monday?")
    own = LessonView("po_own", [unit(1, 0.6, 0)], inputs=["clinic_visits.csv"])  # 0.86 from the request
    # 0.45 from the request and 0.64 from po_own's request: alike wording, another project's input file
    other = LessonView("po_other", [unit(0.45, 0.5, 0.74)], inputs=["door_counts.csv"])
    assert select([own, other], request) == {"po_own"}
    sibling = LessonView("po_sibling", [unit(0.45, 0.5, 0.74)], inputs=["clinic_visits.csv"])
    assert select([own, sibling], request) == {"po_own", "po_sibling"}  # the same file: one work


def test_a_lesson_of_the_requests_own_project_comes_back_for_its_other_files() -> None:
    request = RequestView(unit(1, 0, 0), "Sum the stock issued in issues.csv", files=["issues.csv"])
    loose = unit(0.4, 0.917, 0)  # 0.40 from the request: a sibling task of the project on another of its files
    lesson = LessonView("po_p", [loose], terms=["tickets.csv"], inputs=["tickets.csv"])
    assert select([lesson], request) == set()  # profile-wide: another file, far from the request
    mine = LessonView("po_p", [loose], terms=["tickets.csv"], inputs=["tickets.csv"], project=True)
    assert select([mine], request) == {"po_p"}
    far = LessonView("po_far", [unit(0.1, 0.995, 0)], project=True)  # about something else entirely
    assert select([mine, far], request) == {"po_p"}
