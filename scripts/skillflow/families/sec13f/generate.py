"""Writes the family's synthetic 13F information tables (`workspace/filing_q1.xml`, `filing_q2.xml`).

    python scripts/skillflow/families/sec13f/generate.py            # rewrite the files
    python scripts/skillflow/families/sec13f/generate.py --check    # exit 1 if they differ from the code

The data is invented (issuers, CUSIPs with valid check digits, values in thousands of USD as the classic
13F instructions require) and fully deterministic: the holdings table below fixes every issuer's totals, and a
seeded RNG only decides how a position is split across infoTable rows (sole vs shared discretion) and the
voting split. The totals are chosen so that every ranked task has a tie whose CUSIP order differs from its
name order (the tie-break pitfall shows), a debt (PRN) row sits among the share rows, two positions are new in
Q2 and two were exited.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from xml.sax.saxutils import escape

WORKSPACE = Path(__file__).resolve().parent / "workspace"
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


def files() -> dict[str, str]:
    return {"filing_q1.xml": render(1), "filing_q2.xml": render(2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only compare the files with the generator")
    args = parser.parse_args(argv)
    stale = [n for n, text in files().items() if not (WORKSPACE / n).is_file() or (WORKSPACE / n).read_text() != text]
    if args.check:
        print("stale: " + ", ".join(stale) if stale else "up to date")
        return 1 if stale else 0
    WORKSPACE.mkdir(parents=True, exist_ok=True)
    for name, text in files().items():
        (WORKSPACE / name).write_text(text, encoding="utf-8")
    print(f"wrote {', '.join(files())} to {WORKSPACE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
