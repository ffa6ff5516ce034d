"""/v1/aliases: a tenant's own model aliases, and the operator's that apply to it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gradacc.alias_setting import MAX_NAME


class AliasSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(
        min_length=1,
        max_length=MAX_NAME,
        description="A model of this server (a base, ft:…, a checkpoint) or an upstream route's",
    )


class AliasObject(BaseModel):
    object: Literal["model.alias"] = "model.alias"
    alias: str = Field(description="A name, or a 'prefix*' pattern")
    model: str
    set_by: Literal["tenant", "operator"] = Field(
        description="tenant: yours (/v1/aliases); operator: GRADACC_SERVE_ALIASES. Yours win."
    )


class AliasList(BaseModel):
    object: Literal["list"] = "list"
    data: list[AliasObject]
