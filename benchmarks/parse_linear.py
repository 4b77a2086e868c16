"""Answer parsing time against answer length: a 1 MB answer parses in under 1 s.

    python benchmarks/parse_linear.py

Prints, for degenerate answers of growing size, the seconds to parse and the ratio to the previous
size: about 10 for a 10x longer answer when parsing is linear (100 when quadratic).
"""

from __future__ import annotations

import time

from harness.readouts.extract import extract_number
from harness.readouts.parse import parse_integer

CASES = {"which one, ": lambda t: parse_integer(t, (1, 2, 3)), "one ": lambda t: parse_integer(t),
         "1.5 ": extract_number, "9": lambda t: parse_integer(t, (1, 2, 3))}


def main() -> None:
    print(f"{'answer':>14} {'bytes':>9} {'seconds':>9} {'ratio':>7}")
    for unit, parse in CASES.items():
        previous = None
        for size in (10_000, 100_000, 1_000_000):
            text = unit * (size // len(unit))
            t0 = time.perf_counter()
            parse(text)
            took = time.perf_counter() - t0
            ratio = f"{took / previous:7.1f}" if previous else "      -"
            print(f"{unit!r:>14} {size:>9} {took:9.3f} {ratio}")
            previous = took


if __name__ == "__main__":
    main()
