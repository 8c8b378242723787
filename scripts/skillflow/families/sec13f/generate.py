"""Writes the family's synthetic 13F information tables (`workspace/filing_q1.xml`, `filing_q2.xml`, and the
few-row ones of the `llm` variant in `workspace-llm/`).

    python scripts/skillflow/families/sec13f/generate.py            # rewrite the files
    python scripts/skillflow/families/sec13f/generate.py --check    # exit 1 if they differ from the code

The data is invented (issuers, CUSIPs with valid check digits, values in thousands of USD as the classic
13F instructions require) and fully deterministic: the holdings table below fixes every issuer's totals, and a
seeded RNG only decides how a position is split across infoTable rows (sole vs shared discretion) and the
voting split. The totals are chosen so that every ranked task has a tie whose CUSIP order differs from its
name order (the tie-break pitfall shows), a debt (PRN) row sits among the share rows, two positions are new in
Q2 and two were exited.

The `llm` variant's tables are for a small real LLM that reads the XML and works the answer out by hand: four
holdings a quarter, one infoTable row each (only nameOfIssuer, cusip, value and shrsOrPrnAmt), values in the
thousands, listed largest first. The pitfalls stay: every ranked task has a tie whose document and issuer-name
order differ from the CUSIP order, the element names are still XML names, and values are still in thousands
of USD.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from xml.sax.saxutils import escape

WORKSPACE = Path(__file__).resolve().parent / "workspace"
LLM_WORKSPACE = Path(__file__).resolve().parent / "workspace-llm"
NAMESPACE = "http://www.sec.gov/edgar/document/thirteenf/informationtable"
SEED = 13

# name, CUSIP without its check digit, title of class, (Q1 value, Q1 shares), (Q2 value, Q2 shares);
# values in thousands of USD, None = not held that quarter.
Holding = tuple[str, str, str, tuple[int, int] | None, tuple[int, int] | None]
HOLDINGS: list[Holding] = [
    ("CONTOSO LTD", "21036P10", "COM", (91_544, 612_300), (95_100, 630_000)),
    ("NORTHWIND TRADERS INC", "66987V10", "COM", (63_000, 410_000), (58_750, 395_500)),
    ("WIDE WORLD IMPORTERS", "97717W10", "COM", (52_775, 198_450), (49_900, 190_000)),
    ("ADVENTURE WORKS CORP", "98956P10", "COM", (48_210, 302_000), (51_300, 310_000)),
    ("ZENITH ANALYTICS INC", "11133T10", "COM", (48_210, 121_500), (47_000, 118_000)),
    ("DATUM CORP", "74347R10", "COM", (30_418, 175_000), (35_418, 201_000)),
    ("LITWARE INC", "30303M10", "COM", (25_990, 250_000), (24_000, 240_000)),
    ("PROSEWARE INC", "23804L10", "COM", (18_400, 99_000), (23_400, 120_000)),
    ("BLUE YONDER AIRLINES", "09607Q10", "COM", (12_050, 88_000), (12_800, 90_000)),
    ("TAILSPIN TOYS INC", "87612E10", "COM", (9_315, 143_200), (8_100, 130_000)),
    ("FABRIKAM INC", "53947Q10", "COM", (7_720, 250_000), (9_950, 300_000)),
    ("MARGIES TRAVEL INC", "38259P10", "COM", (3_300, 52_000), None),
    ("GRAPHIC DESIGN INSTITUTE", "56585A10", "COM", (3_300, 40_000), None),
    ("LUCERNE PUBLISHING", "54930L10", "COM", None, (7_500, 60_000)),
    ("ALPINE SKI HOUSE", "92343V10", "COM", None, (7_500, 75_000)),
]
# A debt position: principal amount (PRN), not shares.
NOTES = ("CONTOSO LTD", "21036PAB", "NOTE 2.500% 2031", (5_120, 5_000_000), (5_180, 5_000_000))


# The `llm` variant: (name, CUSIP base, Q1 (value, shares), Q2 (value, shares)), in document order: by value,
# largest first, as many filers list them, so the ranking is in the file and only the ties need a rule. Value,
# shares and change of ADVENTURE WORKS and ZENITH tie, and the two new Q2 positions tie: in each tie the
# document (and issuer-name) order puts the larger CUSIP first.
LlmHolding = tuple[str, str, tuple[int, int] | None, tuple[int, int] | None]
LLM_HOLDINGS: list[LlmHolding] = [
    ("CONTOSO LTD", "21036P10", (9_150, 61_200), (10_650, 61_200)),
    ("ADVENTURE WORKS CORP", "98956P10", (4_820, 30_200), (5_820, 30_200)),
    ("ZENITH ANALYTICS INC", "11133T10", (4_820, 30_200), (5_820, 30_200)),
    ("ALPINE SKI HOUSE", "92343V10", None, (2_500, 20_000)),
    ("LUCERNE PUBLISHING", "54930L10", None, (2_500, 14_000)),
    ("MARGIES TRAVEL INC", "38259P10", (1_200, 8_000), None),
]


# The `script` variant, for a model that answers with a Python script: the same layout and default namespace,
# in no particular order and with no ties, so the namespace is the one thing a script must know beyond the task.
SCRIPT_WORKSPACE = Path(__file__).resolve().parent / "workspace-script"
SCRIPT_HOLDINGS: list[LlmHolding] = [
    ("CONTOSO LTD", "21036P10", (9_150, 61_200), (9_870, 61_200)),
    ("ADVENTURE WORKS CORP", "98956P10", (4_820, 30_200), None),
    ("ZENITH ANALYTICS INC", "11133T10", (5_310, 27_400), (4_990, 27_400)),
    ("MARGIES TRAVEL INC", "38259P10", (1_200, 8_000), (1_750, 11_000)),
    ("FABRIKAM INC", "30303M10", None, (2_600, 13_000)),
]


def cusip_check_digit(base: str) -> str:
    """The ninth character of a CUSIP (modulus 10, double-add-double)."""
    total = 0
    for i, char in enumerate(base.upper()):
        value = int(char) if char.isdigit() else ord(char) - ord("A") + 10
        if i % 2 == 1:
            value *= 2
        total += value // 10 + value % 10
    return str((10 - total % 10) % 10)


def _split(rng: random.Random, value: int, shares: int) -> list[tuple[int, int, str]]:
    """One or two rows (SOLE, then DFND) that add up to the position."""
    if rng.random() < 0.45:
        return [(value, shares, "SOLE")]
    share = rng.choice([0.25, 0.4, 0.6])
    v1, s1 = round(value * share), round(shares * share)
    return [(v1, s1, "SOLE"), (value - v1, shares - s1, "DFND")]


def _row(name: str, title: str, cusip: str, value: int, amount: int, kind: str, discretion: str) -> str:
    sole = amount if kind == "SH" else 0
    return (
        "  <infoTable>\n"
        f"    <nameOfIssuer>{escape(name)}</nameOfIssuer>\n"
        f"    <titleOfClass>{escape(title)}</titleOfClass>\n"
        f"    <cusip>{cusip}</cusip>\n"
        f"    <value>{value}</value>\n"
        f"    <shrsOrPrnAmt>\n      <sshPrnamt>{amount}</sshPrnamt>\n"
        f"      <sshPrnamtType>{kind}</sshPrnamtType>\n    </shrsOrPrnAmt>\n"
        f"    <investmentDiscretion>{discretion}</investmentDiscretion>\n"
        f"    <votingAuthority>\n      <Sole>{sole}</Sole>\n      <Shared>0</Shared>\n"
        f"      <None>{amount - sole}</None>\n    </votingAuthority>\n"
        "  </infoTable>\n"
    )


def render(quarter: int) -> str:
    """The information table of one quarter (1 or 2) as XML text."""
    rng = random.Random(SEED * 10 + quarter)
    rows: list[str] = []
    for name, base, title, q1, q2 in [*HOLDINGS, NOTES]:
        position = q1 if quarter == 1 else q2
        if position is None:
            continue
        cusip = base + cusip_check_digit(base)
        kind = "PRN" if base == NOTES[1] else "SH"
        parts = [(position[0], position[1], "SOLE")] if kind == "PRN" else _split(rng, *position)
        rows.extend(_row(name, title, cusip, v, s, kind, d) for v, s, d in parts)
    body = "".join(rows)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<informationTable xmlns="{NAMESPACE}">\n{body}</informationTable>\n'
    )


def render_llm(quarter: int, holdings: list[LlmHolding] = LLM_HOLDINGS) -> str:
    """A variant's information table of one quarter: one short infoTable row per holding."""
    rows: list[str] = []
    for name, base, q1, q2 in holdings:
        position = q1 if quarter == 1 else q2
        if position is None:
            continue
        value, shares = position
        rows.append(
            "  <infoTable>\n"
            f"    <nameOfIssuer>{escape(name)}</nameOfIssuer>\n"
            f"    <cusip>{base + cusip_check_digit(base)}</cusip>\n"
            f"    <value>{value}</value>\n"
            f"    <shrsOrPrnAmt><sshPrnamt>{shares}</sshPrnamt><sshPrnamtType>SH</sshPrnamtType></shrsOrPrnAmt>\n"
            "  </infoTable>\n"
        )
    body = "".join(rows)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<informationTable xmlns="{NAMESPACE}">\n{body}</informationTable>\n'
    )


def files() -> dict[str, str]:
    return {"filing_q1.xml": render(1), "filing_q2.xml": render(2)}


def llm_files() -> dict[str, str]:
    return {"filing_q1.xml": render_llm(1), "filing_q2.xml": render_llm(2)}


def script_files() -> dict[str, str]:
    return {f"filing_q{q}.xml": render_llm(q, SCRIPT_HOLDINGS) for q in (1, 2)}


def _outputs() -> dict[Path, str]:
    """Every generated file by its path: the family's workspace and the `llm` and `script` variants'."""
    return (
        {WORKSPACE / n: t for n, t in files().items()}
        | {LLM_WORKSPACE / n: t for n, t in llm_files().items()}
        | {SCRIPT_WORKSPACE / n: t for n, t in script_files().items()}
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only compare the files with the generator")
    args = parser.parse_args(argv)
    outputs = _outputs()
    stale = [str(p.relative_to(WORKSPACE.parent)) for p, t in outputs.items() if not p.is_file() or p.read_text() != t]
    if args.check:
        print("stale: " + ", ".join(stale) if stale else "up to date")
        return 1 if stale else 0
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"wrote {', '.join(str(p.relative_to(WORKSPACE.parent)) for p in outputs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
