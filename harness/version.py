"""The harness's version: in every trial's cache key and record, each run's params and the API
models' User-Agent. A module of its own, below every stage, so that a stage can read it without
importing the package root (which exposes the Python API, above the stages)."""

__version__ = "0.1.0"
