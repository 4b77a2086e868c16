"""What an option is: a field of a pydantic model checked before anything runs.

Task options (:class:`~harness.stimuli.registry.TaskOptions`), readout settings
(:class:`~harness.readouts.base.ReadoutSettings`) and model sources' options
(:class:`~harness.models.base.ModelOptions`) all derive from :class:`Options`: unknown keys are
refused and values are strict, so an integer is an integer (not YAML's ``true``, nor ``"40"``,
nor ``40.0``), a number is not text and a boolean is ``true`` or ``false``. A field that takes
YAML's list for a tuple says so with ``Field(strict=False)`` (its items stay strict); a path
is a :data:`PathOption`. The recipe loader reports a refusal with the recipe's file, line and key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Strict


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


PathOption = Annotated[Path, Strict(False)]  # a path, which YAML writes as text
