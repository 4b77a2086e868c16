"""Words for chart titles and axis titles: GRAPE's own word source.

GRAPE's generator draws its chart title and both axis titles with ``RandomWords().random_word()``
from the ``RandomWords`` package (module ``random_words``, MIT): one of its nouns, uniformly
(UtilIO.add_title / add_title_and_axis). A word says nothing about the task, but its length is
the largest text on the chart, and a network trained on shorter words scores the authors' charts
differently (docs/grape-generator-audit.md); so gestalt draws from the same list, read from the
installed package (pinned in pyproject.toml) in its file's order. Changing it changes every
rendered chart: bump ``RENDER_VERSION`` in layout.py.
"""

from __future__ import annotations

import json
from importlib.resources import files

NOUNS = files("random_words").joinpath("nouns.dat")  # {"a": [...], "c": [...], ...}

WORDS: tuple[str, ...] = tuple(word for letter in json.loads(NOUNS.read_text()).values() for word in letter)
