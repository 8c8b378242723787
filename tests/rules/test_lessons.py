"""The lesson sentence classifier, the instance filter and subject terms: the pure rules every learning stage
shares. Wordings here are this file's own (none is a corpus family's), in English and Chinese, in every feedback
style the service meets: a verifier payload's message, verifier text, a user's correction in either language, a
terse one-liner, long mixed praise and correction."""

from __future__ import annotations

import pytest

from memos_bridge.rules.instance import InstanceContext, instance_specific, strip_instance
from memos_bridge.rules.lessons import (
    convention_overlap,
    group_lessons,
    read_feedback,
    role_of,
    sentences,
)
from memos_bridge.rules.subjects import identifiers, mentions, numbers, owner_names, shares_words, subject_of, units

NAIVE = InstanceContext.build(answer_texts=['Done: wrote answer.json with {"total_kg": 910.0}.'], fields=["total_kg"])


def lessons(text: str, context: InstanceContext = NAIVE) -> list[list[str]]:
    return [group.texts for group in group_lessons(read_feedback(text, context).lessons)]


# ---------------------------------------------------------------- sentences


def test_sentences_split_on_sentence_marks_not_on_numbers_files_or_abbreviations() -> None:
    text = "Multiply by 0.4536, e.g. for shipments.csv. Weights are pounds!\nNext line。第二句。"
    assert sentences(text) == [
        "Multiply by 0.4536, e.g. for shipments.csv.",
        "Weights are pounds!",
        "Next line。",
        "第二句。",
    ]


# ---------------------------------------------------------------- roles, EN and ZH


@pytest.mark.parametrize(
    ("text", "role"),
    [
        ("The tare column is recorded in ounces.", "convention"),
        ("`ship_date` values are day-first.", "convention"),
        ("Status code 7 means the order was refunded.", "convention"),
        ("Convert every duration to minutes before summing.", "instruction"),
        ("Always round the rates to one decimal.", "instruction"),
        ("Next time, skip the header row of the ledger.", "instruction"),
        ("Never delete rows flagged keep.", "prohibition"),
        ("Don't add the tax twice.", "prohibition"),
        ("The rate is a percentage, not a fraction.", "correction"),
        ("Use UTC instead of local time.", "correction"),
        ("I prefer the totals as whole euros.", "preference"),
        ("You added the ounces as if they were grams.", "diagnosis"),
        ("tare=oz, ÷16 for lb", "note"),
        ("Great work, thanks!", "praise"),
        ("That won't run.", "complaint"),
        ("仓库导出的 tare 列单位是盎司。", "convention"),
        ("汇总前要先把时长换算成分钟。", "instruction"),
        ("别把税加两次。", "prohibition"),
        ("费率不是小数而是百分数。", "correction"),
        ("我喜欢用整数欧元表示总额。", "preference"),
    ],
)
def test_every_sentence_shape_gets_its_role(text: str, role: str) -> None:
    assert role_of(text) == role


@pytest.mark.parametrize("text", ["wrong", "不对", "try again", "Wrong, try again", "不对，再试试", "This is correct."])
def test_bare_verdicts_teach_nothing(text: str) -> None:
    assert read_feedback(text).lessons == []


# ---------------------------------------------------------------- the faithful core, and instance content


@pytest.mark.parametrize(
    ("text", "lesson"),
    [
        # a verifier's message: its verdict and ids go, its rule stays word for word
        (
            "FAIL wt-3: total_kg mismatch. The tare column is recorded in ounces; divide by 35.274 for kg.",
            "The tare column is recorded in ounces; divide by 35.274 for kg.",
        ),
        # verifier text with the values inline
        (
            "check wt-3 total_kg: expected 412.77, got 910.0. Tare is in ounces — divide by 35.274.",
            "Tare is in ounces — divide by 35.274.",
        ),
        # a user in English with the right answer
        (
            "The tare is in ounces, so divide by 35.274. It should come to 412.77.",
            "The tare is in ounces, so divide by 35.274.",
        ),
        # a user in Chinese with the right answer and this attempt's value
        (
            "tare 列的单位是盎司，要除以 35.274 才是千克。正确答案是 412.77。你算出来的是 910。",
            "tare 列的单位是盎司，要除以 35.274 才是千克。",
        ),
        # terse
        ("tare is oz not kg (÷35.274)", "tare is oz not kg (÷35.274)"),
        # long mixed: praise and values around the correction
        (
            "Thanks, the layout is perfect. But the total came out as 910.0 and it should be 412.77 — our tare "
            "column is in ounces, so divide by 35.274 to get kilograms. Everything else looks fine!",
            "Our tare column is in ounces, so divide by 35.274 to get kilograms.",
        ),
    ],
    ids=["verifier_payload", "verifier_text", "user_en", "user_zh", "terse", "long_mixed"],
)
def test_the_lesson_is_the_feedbacks_own_sentence_without_this_attempts_values(text: str, lesson: str) -> None:
    assert lessons(text) == [[lesson]]


@pytest.mark.parametrize(
    "text",
    [
        "Expected 1234.5 but got 1234500.",
        "The right answer was 17.",
        "正确答案是 412.77。",
        "Verifier: FAIL for t7_stock",
        "check wt-3: mismatch",
        "expected: ledger sync --all acct-9\n  got: ledger sync acct-9",
        "The westernmost depot is dp_441.",
        "Leave them out: 13 pallets, 1960 kg shipped.",
    ],
)
def test_instance_content_never_becomes_a_lesson(text: str) -> None:
    assert read_feedback(text, NAIVE).lessons == []


@pytest.mark.parametrize(
    ("sentence", "kept"),
    [
        ("Multiply by 0.4536 to get 412.77.", ["0.4536"]),
        ("Divide by 1,000 before reporting.", ["1,000"]),
        ("The service listens on port 8443.", ["8443"]),
        ("Round to 2 decimals.", ["2"]),
        ("The depot clock runs at UTC+10.", ["10"]),
        ("Rates are on a 0-100 scale.", ["0", "100"]),
        ("A missing fee field means the standard 1.00 EUR fee.", ["1.00"]),
    ],
)
def test_numbers_that_are_part_of_a_convention_stay(sentence: str, kept: list[str]) -> None:
    filtered = strip_instance(sentence, InstanceContext())
    assert filtered.text and all(number in filtered.text for number in kept), filtered


def test_a_format_shown_by_example_stays_a_bare_answer_goes() -> None:
    context = InstanceContext.build(answer_texts=['{"duration": 310}'])
    assert lessons("Durations go in as hours and minutes, like 5:10, not 310.", context) == [
        ["Durations go in as hours and minutes, like 5:10."]
    ]


def test_a_value_known_to_be_this_attempts_is_removed_wherever_it_stands() -> None:
    context = InstanceContext.build(expected={"stock": 1234.5}, actual={"stock": 1234500})
    assert lessons("Values of 1234500 are raw units: the stock column is in thousands.", context) == [
        ["The stock column is in thousands."]
    ]


def test_a_corrected_copy_of_the_answer_goes_a_rule_naming_part_of_it_stays() -> None:
    context = InstanceContext.build(answer_texts=['{"command": "tw status churn-scores"}'])
    kept = lessons(
        "Write it as tw --workspace ws-4471 status churn-scores, with the flag straight after tw. "
        "tw needs the global flag --workspace before the subcommand.",
        context,
    )
    assert all("churn-scores" not in line for group in kept for line in group), kept
    assert any("global flag --workspace before the subcommand" in line for group in kept for line in group), kept


def test_lines_stored_earlier_that_restate_an_attempt_are_instance_specific() -> None:
    assert instance_specific("`top_total_value` should be 13970, got 14070.")
    assert instance_specific("Expected 12 rows but got 9.")
    assert instance_specific("Verifier: FAIL for t3_weights")
    assert not instance_specific("Amounts must be rounded to 2 decimals.")
    assert not instance_specific("Report `v` in thousands: divide by 1,000 (expected 1, got 1000).")


# ---------------------------------------------------------------- one lesson per convention


def test_two_conventions_in_one_feedback_are_two_lessons_and_a_continuation_stays() -> None:
    text = (
        "Our tare column is in ounces. Divide by 35.274 to get kilograms. The fee column is in cents, so divide by 100."
    )
    assert lessons(text) == [
        ["Our tare column is in ounces.", "Divide by 35.274 to get kilograms."],
        ["The fee column is in cents, so divide by 100."],
    ]


def test_a_sentence_that_points_back_keeps_the_one_it_points_to() -> None:
    text = "You dropped each line tagged RET-, but those lines are genuine orders. Look them up in ret_codes.csv."
    assert lessons(text) == [
        ["You dropped each line tagged RET-, but those lines are genuine orders.", "Look them up in ret_codes.csv."]
    ]


def test_the_same_convention_in_another_language_overlaps_a_different_one_does_not() -> None:
    english = subject_of("The `tare` field is in ounces: divide by 35.274.", numbers("35.274"))
    chinese = subject_of("`tare` 字段的单位是盎司，要除以 35.274。", numbers("35.274"))
    other = subject_of("The `fee` field is in cents.")
    assert convention_overlap(english, chinese, 0.0)
    assert not convention_overlap(english, other, 0.0)


def test_a_look_alike_rule_of_other_inputs_is_not_the_same_convention() -> None:
    """Same factor and unit, different names: one convention only when learnt on the same inputs."""
    litres = subject_of("The usage column is in litres: divide it by 1000 to get cubic metres.", numbers("1000"))
    millilitres = subject_of("water 这一列的单位是毫升，不是升，求和之前除以 1000。", numbers("1000"))
    assert not convention_overlap(litres, millilitres, 0.1, same_context=False)
    gross = subject_of("gross_weight is in pounds: multiply by 0.4536.", numbers("0.4536"))
    net = subject_of("net_weight is in pounds too: multiply by 0.4536.", numbers("0.4536"))
    assert convention_overlap(gross, net, 0.3, same_context=True)
    assert not convention_overlap(gross, net, 0.3, same_context=False)


# ---------------------------------------------------------------- subject terms and recall by subject


def test_identifiers_units_and_numbers_are_found_by_shape() -> None:
    text = "In `ledger.csv` the amt_cents field of ledger.entries, --dry-run and X-Api-Key, "
    text += "under archive/, the tare column"
    assert identifiers(text) == [
        "ledger.csv",
        "amt_cents",
        "ledger.entries",
        "--dry-run",
        "X-Api-Key",
        "archive/",
        "tare",
    ]
    assert [u.canonical for u in units("pounds, 磅, kg and 千克, per cent")] == ["lb", "kg", "percent"]
    assert [n.text for n in numbers("08/01/2024 at 14:30 costs $12.50, x0.4536, 1,000")] == [
        "$12.50",
        "0.4536",
        "1,000",
    ]


def test_a_request_names_a_subject_by_its_names_not_by_a_word_inside_a_flag() -> None:
    assert mentions("Which region sold most?", ["--region"]) is False
    assert mentions("Deploy with deployctl --region eu-2", ["--region"]) is True
    assert mentions("Which carrier in depot_manifest_may13.txt?", ["depot_manifest_may12.txt"]) is True
    assert mentions("Count rows of marigold_orders.csv", ["returns", "larkspur_returns.csv"]) is False
    assert mentions("Total tare in kilograms", ["kg"]) is True
    assert shares_words("force push the release to main", ["main", "force", "push"])
    assert not shares_words("compute the revenue", ["main", "force", "push"])


@pytest.mark.parametrize(
    ("feedback", "conventions"),
    [
        ("Amounts are in cents; divide by 100.", 1),  # a bare operation is the remedy of what came before
        ("Weight is in pounds; multiply by 0.4536.", 1),
        ("Dates are day-first; parse them with %d/%m/%Y.", 1),  # "them" points back
        ("Convert first (times 0.4536) and then apply the 10 kg cut-off.", 1),  # one procedure in order
        ("Read the file and sum the weight column in pounds.", 1),  # "read the file" says nothing of its own
        ("金额以分为单位；除以 100 得到元。", 1),
        (
            "Do not read order_date month-first: the exports write dates day-first (DD/MM/YYYY), so 08/01/2024 is "
            "8 January 2024, not 1 August, and each order belongs to the month of that date.",
            1,  # "that date" names what the first part named
        ),
        ("The weight column is in pounds, and the cost column is in cents.", 2),
        ("amount in cents; exclude void", 2),
        ("comma = decimal; skip trailer 99999999", 2),
        ("Pad SKU numbers to six digits and map OLD- codes.", 2),  # two commands, two things
        ("Convert amount from cents to dollars and skip the three void invoices.", 2),
        (
            "Two things about our API: amount is in cents, and void invoices were cancelled, so they don't count "
            "towards the total.",
            2,  # "they" follows the part's own subject
        ),
        (
            "Two things: the comma in unit_price is a decimal comma, not a thousands separator. The last line is "
            "the feed's control total.",
            2,  # a counted lead-in: each item its own lesson; "the last line is …" is a layout, not a result
        ),
    ],
)
def test_one_lesson_per_convention_by_sentence_structure(feedback: str, conventions: int) -> None:
    groups = group_lessons(read_feedback(feedback).lessons)
    assert len(groups) == conventions, [g.texts for g in groups]


# ---------------------------------------------------------------- results stated in other shapes


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        # "want" / "got" label this attempt's values like "expected" / "actual"; the field names are labels
        ("top_customer: got 'Mereworth Kitchens', want 'Penrose Builders'.", ""),
        # the values after an arrow are results; the rule before it stays
        ("read gateway.log.1/.2 too → 12 errors, wf-gw-01", "read gateway.log.1/.2 too"),
        ("list prices are VAT-inclusive → ÷1.2", "list prices are VAT-inclusive → ÷1.2"),
        # the left side of a relation is its subject
        ("qty = boxes (×12): 14 → 168", "qty = boxes (×12)"),
        # a group size is a rule's parameter
        (
            "qty in boxes of 12; list prices gross (incl VAT) → 1122.0",
            "qty in boxes of 12; list prices gross (incl VAT)",
        ),
        # a command before a result joined by "and" stays; the result goes
        ("Drop that last line and the total charge is 10175.15.", "Drop that last line."),
        ("Multiply by 12 and you get 168.", "Multiply by 12."),
        # a Chinese clause that only said what the value is goes; the rule before it stays
        ("要不含税的价格得先除以 1.2——合页应该是 3.50 镑，木材类平均是 44.84 镑。", "要不含税的价格得先除以 1.2。"),
        ("减完以后排第一的是 Penrose Builders，4750.8 英镑，而不是 Mereworth 的 11742。", ""),
        ("第一行是表头，要跳过。", "第一行是表头，要跳过。"),
        (
            "bearing_temp 的单位是 0.1 °C，先除以 10 再和 45 比较，平均 41.0。",
            "bearing_temp 的单位是 0.1 °C，先除以 10 再和 45 比较。",
        ),
    ],
)
def test_results_in_other_shapes_are_removed_and_the_rule_stays(text: str, kept: str) -> None:
    context = InstanceContext.build(
        answer_texts=['Done: wrote answer.json with {"top_customer": "Mereworth Kitchens", "errors": 3}.']
    )
    assert strip_instance(text, context).text == kept


def test_a_company_named_by_a_task_makes_its_lessons_recallable_for_its_other_files() -> None:
    assert owner_names("Wrenfield Telecom's edge gateways write to gateway.log.") == ["Wrenfield Telecom"]
    assert owner_names("For Larkspur Parcel Co. exports, what is the total?") == ["Larkspur Parcel Co"]
    assert owner_names("What The total is, in kg?") == []  # capitalised function words name nothing
    assert owner_names("Count ERROR lines in auth.log") == []  # acronyms are not names
    assert mentions("How many hours does the Wrenfield gateway log span?", ["auth.log", "Wrenfield Telecom"])
    assert not mentions("How many hours does the Brackenfield log span?", ["auth.log", "Wrenfield Telecom"])


def test_a_field_or_code_is_named_by_all_its_pieces_a_file_by_two_of_its_words() -> None:
    assert not mentions("What is the average unit_price of the fasteners?", ["unit_price_gbp"])
    assert mentions("Net price from unit_price_gbp in the list", ["unit_price_gbp"])
    assert not mentions("Using larchmont_eu_west_snapshots.json, which volume frees most?", ["eu-west-1"])
    assert mentions("Which carrier shipped most in the Kestrel manifest?", ["kestrel_manifest_apr12.txt"])


def test_a_checkers_heading_is_a_verdict_not_a_lesson() -> None:
    reading = read_feedback("order-check failed: got AB-12, expected ZQ-9. The kiosk times are UTC; add two hours.")
    assert reading.lines[0].role == "instance"
    assert [line.text for line in reading.lessons] == ["The kiosk times are UTC; add two hours."]
    # a tag or a heading before a rule leaves the rule; values a checker compares are this task's own
    tagged = read_feedback("[totals-check] crate count: n=12 m=14 -> FAIL. Expected K7 at D-2. Box B-1 != B-4.")
    assert not tagged.lessons or all("->" not in line.text for line in tagged.lessons)
    assert all(line.role in ("instance", "note") for line in tagged.lines), tagged.lines
    (rule,) = read_feedback("retry FAIL: the crate column counts dozens, so multiply by 12.").lines
    assert rule.text == "The crate column counts dozens, so multiply by 12." and rule.actionable
    # an identifier ending in a capital letter ends its sentence ("… got YU-Q. The log …")
    assert len(read_feedback("Expected gate HA-1, got YU-Q. The log clock is UTC.").lines) == 2
    # a checker's dot leader before its status is one report line, not a sentence end followed by a verdict
    leader = read_feedback("check tally_kg ... FAILED. got 41, want 57. The scale reads grams; divide by 1000.")
    assert [line.text for line in leader.lessons] == ["The scale reads grams; divide by 1000."]


def test_a_lead_in_stays_apart_from_the_rule_when_this_attempts_content_is_cut_between_them() -> None:
    context = InstanceContext.build(expected={"top_site": "South Depot"}, actual={"top_site": "North Depot"})
    reading = read_feedback(
        "One catch though: North Depot only ranks first because two of its rows show -1, the scanner's code for a "
        "missed read.",
        context,
    )
    assert [line.text for line in reading.lessons] == [
        "Two of its rows show -1, the scanner's code for a missed read."
    ], reading.lines


def test_a_question_an_agreeing_verdict_and_an_observation_of_this_attempt_are_no_lessons() -> None:
    reading = read_feedback(
        "Under a gram per parcel? Those parcels weigh two or three kilos. That matches the warehouse's own count. "
        "Remember the mass column is in grams, not kg."
    )
    roles = [line.role for line in reading.lines]
    assert roles[:3] == ["note", "note", "praise"]
    assert [line.text for line in reading.lessons] == ["Remember the mass column is in grams, not kg."]
    # a demonstrative subject with a rule of its own is still a lesson
    assert read_feedback("Those rows are test orders and never count.").lines[0].role == "prohibition"


def test_the_outcome_this_attempt_would_reach_is_cut_from_the_lesson() -> None:
    (line,) = read_feedback("The log is in UTC — add two hours and the late rate falls to half.").lines
    assert line.text == "The log is in UTC — add two hours."
    assert any("rate falls" in removed for removed in line.removed)


def test_what_a_computation_comes_to_is_this_tasks_answer_and_the_method_before_it_stays() -> None:
    # a closing clause stating a value or a name the computation gives is the expected answer
    assert not read_feedback("Counting only the signed rows gives Ashgrove Court.").lessons
    assert not read_feedback("Summing the real rows gives 4,120.").lessons
    (kept,) = read_feedback("Leave out the void rows, which puts Ashgrove Court first.").lessons
    assert kept.text == "Leave out the void rows."
    # what a rule itself gives (a unit, a zone, a size) is the rule
    assert [line.text for line in read_feedback("Dividing by 1000 gives kilograms.").lessons] == [
        "Dividing by 1000 gives kilograms."
    ]
    assert read_feedback("Adding nine hours gives JST.").lessons
    assert read_feedback("The stamp is in milliseconds, which gives numbers 1000 times too big.").lessons
    # a second clause that says what the result then is goes; the rule before it stays
    (dropped,) = read_feedback("Skip the 9999 rows and the mean is 412.5.").lessons
    assert dropped.text == "Skip the 9999 rows."
    assert read_feedback("The sentinel is 9999.").lessons  # a rule's own value, said as the sentence's verb


def test_a_value_the_data_holds_stays_in_its_rule_however_tersely_it_is_defined() -> None:
    context = InstanceContext.build(expected={"mean_temp": 21.4}, actual={"mean_temp": 388.52})
    (terse,) = read_feedback("8888.8 = sensor fault, not a value. Skip it → 21.4.", context).lessons
    assert "8888.8" in terse.text and "21.4" not in terse.text
    (told,) = read_feedback(
        "The mean is still 388.52. Our meters write 8888.8 when a probe is unplugged, so treat it as missing.", context
    ).lessons
    assert told.text == "Our meters write 8888.8 when a probe is unplugged, so treat it as missing."


def test_a_lesson_pointing_at_that_number_says_which_value_of_the_data_it_means() -> None:
    context = InstanceContext.build(expected={"mean_temp": 21.4}, actual={"mean_temp": 388.52})
    reading = read_feedback(
        "One catch: 388.52 got pulled up by a few rows showing 8888.8. That number is what the meter writes when a "
        "probe is unplugged, so it is no reading at all.",
        context,
    )
    assert [line.text for line in reading.lessons] == [
        "That number (8888.8) is what the meter writes when a probe is unplugged, so it is no reading at all."
    ]


def test_a_marker_value_keeps_its_place_past_its_unit_and_a_field_name() -> None:
    context = InstanceContext.build(expected={"mean_dwell": 31.5}, actual={"mean_dwell": 402.25})
    (unit_first,) = read_feedback(
        "40713 s is the scanner's 'no exit-gate read' filler, not a dwell time; drop those rows.", context
    ).lessons
    assert unit_first.text.startswith("40713 s is the scanner's")
    (in_paren,) = read_feedback(
        "The value 40713 s (24:41:28) means the tag wasn't read; skip such rows.", context
    ).lessons
    assert "40713" in in_paren.text and "wasn't read" in in_paren.text
    (named,) = read_feedback("Rows with dwell_s 40713 (no exit read) must not enter the mean.", context).lessons
    assert "dwell_s 40713" in named.text


def test_a_number_written_against_chinese_characters_is_read_as_a_number() -> None:
    assert [n.text for n in numbers("要乘以12才是个数，大约是347箱")] == ["12", "347"]
    context = InstanceContext.build(expected={"crates": 347.5}, actual={"crates": 28.9})
    reading = read_feedback("每托盘记的是打数，要乘以12。那批大约是347箱。", context)
    assert [line.text for line in reading.lessons] == ["每托盘记的是打数，要乘以12。"]


def test_a_chinese_clause_whose_done_verb_lost_its_value_goes_with_it() -> None:
    context = InstanceContext.build(expected={"kwh": 41.2}, actual={"kwh": 412.0})
    reading = read_feedback("西楼三天不可能用了 412 度电。kwh 这一列是十分之一度，要除以 10。", context)
    assert [line.text for line in reading.lessons] == ["kwh 这一列是十分之一度，要除以 10。"]


def test_an_account_of_the_attempt_turned_by_but_leaves_the_rule_after_it() -> None:
    context = InstanceContext.build(actual={"last_dispatch": "09:12"})
    reading = read_feedback("You gave the raw stamp, 09:12, but the dock clock runs on UTC.", context)
    assert [(line.text, line.role) for line in reading.lessons] == [("The dock clock runs on UTC.", "convention")]
    zh = read_feedback("你直接把读数加起来了，但是 load 这一列是十分之一吨。", context)
    assert [line.text for line in zh.lessons] == ["load 这一列是十分之一吨。"]  # a field name keeps its case
    pointing = read_feedback("You dropped each line tagged VOID-, but those lines are genuine orders.", context)
    assert [line.text for line in pointing.lessons] == [
        "You dropped each line tagged VOID-, but those lines are genuine orders."
    ]


def test_what_happened_in_the_tasks_data_after_so_is_its_answer_not_the_rule() -> None:
    context = InstanceContext.build(actual={"last_dispatch": "09:12"})
    (line,) = read_feedback(
        "Local time is three hours ahead (UTC+3), so the last van left at 12:12 local.", context
    ).lessons
    assert line.text == "Local time is three hours ahead (UTC+3)."
    (rule,) = read_feedback("The dock clock is UTC+3, so the shift starts at 03:00 UTC.", context).lessons
    assert "03:00" in rule.text  # a present-tense consequence is part of the convention
