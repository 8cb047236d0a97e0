"""The frozen base every configuration model shares, and its constrained number types."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
PositiveSeconds = Annotated[float, Field(gt=0.0)]


class Frozen(BaseModel):
    # allow_inf_nan=False: `.nan` or `.inf` in YAML (and `nan` on the command line) is a usage
    # error naming the key, never a threshold every comparison silently fails or passes
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
