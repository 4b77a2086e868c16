"""Arial's 9-px digits as GRAPE's charts show them: the glyphs of every tick label.

GRAPE draws its tick labels ("1" ... "10" under the bars, "0" ... "100" beside the y axis) with
Arial at 9 px through PIL, whose FreeType hints Arial's outlines: every digit is a 7-row cell
5 px wide at a 5-px advance, its top 2 rows below the text origin. Arimo, the Arial-metric font
gestalt draws the words with, is a variable font without hinting instructions; its digits are 6
rows tall and lighter, and a network trained on them read the authors' labels differently
(docs/grape-generator-audit.md: with Arimo's digits the labels carried most of the generator
gap). Arial cannot be
shipped, so the ten cells are kept here as the coverage (0-255) that PIL blends black ink with,
measured on the authors' charts: on each of the 500 dev charts in
``sources/grape/authors-test-type1-dev`` every pixel of every label is the one coverage whose
blend with that chart's background gives the observed colour, the same on all 500 and for a
digit in every label it appears in (``tests/test_bars_generator_gap.py`` measures them again).
"""

from __future__ import annotations

import numpy as np

SIZE = 9  # the axis text size the cells were measured at
ADVANCE = 5
TOP = 2  # rows from the text origin to the cell's top
ROWS = 7

_CELLS = {
    "0": ("05acf29c02", "58a30fac45", "8f46004d83", "9d34003f90", "8f45005182", "5aa50fb04b", "05a9f4a202"),
    "1": ("0000805c00", "019bde5c00", "024d705c00", "0000705c00", "0000705c00", "0000705c00", "0000705c00"),
    "2": ("0fbcf5b80c", "757a09946d", "0000006865", "000026c109", "0035bc1b00", "23b40d0000", "9fffffff88"),
    "3": ("08b5f58e00", "679010b92d", "000015b91c", "0005f0c50f", "0000007380", "7e7b0c8b78", "10bcf4b00b"),
    "4": ("000052b300", "001fbab400", "04ad2eb400", "844318b400", "e4ffffff94", "000018b400", "000018b400"),
    "5": ("00f0ffff58", "19a7000000", "41d2f0b70d", "689c0c9177", "0000003a9a", "7f890f9a66", "12bef2a106"),
    "6": ("0295f1b907", "528c0c965d", "91a0edb409", "a49c0c926a", "934c004190", "5bac119665", "05a1f3b307"),
    "7": ("94ffffff94", "000002b925", "0000628100", "0000cb1600", "002eac0000", "0078600000", "00a0380000"),
    "8": ("04acf3a101", "4ba60caf41", "3ba60bac32", "08d0ffc205", "8370097e78", "8c76097984", "19c2f6be14"),
    "9": ("0ab1f49d02", "6e9a0da055", "9739004d8d", "738e0c9d97", "0ebceca385", "63810d9446", "0ac0f49000"),
}
CELLS: dict[str, np.ndarray] = {
    d: np.array([list(bytes.fromhex(row)) for row in rows], np.uint8) for d, rows in _CELLS.items()}


def is_label(text: str, size: int) -> bool:
    """Whether ``text`` is drawn from the cells: digits only, at the size they were measured at."""
    return size == SIZE and text.isascii() and text.isdigit()


def coverage(text: str) -> np.ndarray:
    """(7, 5 * len(text)) coverage of a digit string, its cells side by side."""
    return np.concatenate([CELLS[d] for d in text], axis=1)
