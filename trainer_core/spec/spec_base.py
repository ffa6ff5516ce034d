"""The base of the job spec's field groups: unknown fields refused, values frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class SpecBase(BaseModel):
    model_config = ConfigDict(extra="forbid", str_max_length=1024, frozen=True)
