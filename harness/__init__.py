"""gestalt: does a vision model see like a person? Psychophysics-grade evaluation harness.

Stages, in the only direction data flows:
sources -> stimuli -> models -> readouts -> trials -> scores -> tracking -> reports.
A module never imports from a later stage (tests/test_layers.py enforces it).
"""

__version__ = "0.1.0"
