"""Bar-chart ratio battery: Cleveland & McGill's position-length task as Haehn et al. (2019) and
GRAPE (Cui et al. 2025) generate it.

- grape.py / haehn.py: charts as parameters (sampling, GRAPE's OOD settings and mixtures,
  Haehn's label-disjoint splits);
- layout.py: the drawing operations of a chart, shared by the fast batch renderer (render.py)
  and the PIL ImageDraw reference (pil_reference.py);
- colours.py, words.py, axis_digits.py: GRAPE's colour pools and lightness, title words, and
  Arial's tick-label digits;
- humans.py: the published human MLAE per chart type (MLAEReferences, read from the sources);
- authors.py: test charts rendered by GRAPE's own generator, scored beside gestalt's;
- tasks.py: the ``ratio.chart.*`` task builders.
"""
