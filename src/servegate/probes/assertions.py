"""What a probe asserts about a completion: frozen models, one per `type`, a union tagged on `type`.

These are data only; `servegate.probes.outcome.check` judges a completion against one of them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servegate.probes.schema import unsupported_keywords


class _Assertion(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Equals(_Assertion):
    """Content equals `value` (surrounding whitespace ignored unless `strip` is false)."""

    type: Literal["equals"]
    value: str
    ignore_case: bool = False
    strip: bool = True


class Contains(_Assertion):
    type: Literal["contains"]
    value: str = Field(min_length=1)
    ignore_case: bool = False


class NotContains(_Assertion):
    type: Literal["not-contains"]
    value: str = Field(min_length=1)
    ignore_case: bool = False


class Regex(_Assertion):
    """Content matches `pattern` somewhere (or as a whole with `full`)."""

    type: Literal["regex"]
    pattern: str
    ignore_case: bool = False
    full: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from None
        return value


class IsJson(_Assertion):
    """Content is one JSON value (NaN/Infinity refused); a ```json fence only with `allow_fence`."""

    type: Literal["is-json"]
    allow_fence: bool = False


class JsonSchema(_Assertion):
    type: Literal["json-schema"]
    json_schema: dict[str, Any] = Field(alias="schema")
    allow_fence: bool = False

    @field_validator("json_schema")
    @classmethod
    def _supported(cls, value: dict[str, Any]) -> dict[str, Any]:
        problems = unsupported_keywords(value)
        if problems:
            raise ValueError("unsupported JSON-schema keywords: " + ", ".join(problems))
        return value


class ExpectedCall(_Assertion):
    """One expected function call, BFCL-style.

    `arguments` maps a parameter to its allowed values; `parameters` is the function's JSON schema,
    filled from the probe's `request.tools` when the suite loads.
    """

    name: str = Field(min_length=1)
    arguments: dict[str, tuple[Any, ...]] = Field(default_factory=dict)
    parameters: dict[str, Any] | None = None


class ToolCall(_Assertion):
    """The expected calls were made, in any order; with `exact`, no other call was made."""

    type: Literal["tool-call"]
    calls: tuple[ExpectedCall, ...] = Field(min_length=1)
    exact: bool = True


class NoToolCall(_Assertion):
    type: Literal["no-tool-call"]


class FinishReason(_Assertion):
    type: Literal["finish-reason"]
    value: str | tuple[str, ...]

    @property
    def allowed(self) -> tuple[str, ...]:
        return (self.value,) if isinstance(self.value, str) else self.value


class MaxLength(_Assertion):
    type: Literal["max-length"]
    chars: int = Field(ge=0)


class MinLength(_Assertion):
    type: Literal["min-length"]
    chars: int = Field(ge=0)


ScriptName = Literal[
    "han", "kana", "hangul", "latin", "cyrillic", "greek", "arabic", "hebrew", "devanagari", "thai"
]
LanguageCode = Literal["zh", "ja", "ko", "ru", "el", "ar", "en", "fr", "es", "de"]


class Script(_Assertion):
    """At least `min_share` of the letters in the content belong to `script`."""

    type: Literal["script"]
    script: ScriptName
    min_share: float = Field(default=0.5, ge=0.0, le=1.0)


class Language(_Assertion):
    """The content is in `language`: its script share, plus function words for Latin languages."""

    type: Literal["language"]
    language: LanguageCode
    min_share: float = Field(default=0.5, ge=0.0, le=1.0)


class NoDegeneration(_Assertion):
    """No severe degeneration; empty output fails unless the baseline was empty too."""

    type: Literal["no-degeneration"]
    allow_empty: bool = False


class Refusal(_Assertion):
    type: Literal["refusal"]
    phrases: tuple[str, ...] | None = None


class NoRefusal(_Assertion):
    type: Literal["no-refusal"]
    phrases: tuple[str, ...] | None = None


Normalisation = Literal["whitespace", "case", "punctuation"]


class MatchesBaseline(_Assertion):
    """Content (or the tool calls) equals the baseline's, exactly or after normalisation."""

    type: Literal["matches-baseline"]
    ignore: tuple[Normalisation, ...] = ()
    field: Literal["content", "tool_calls"] = "content"


class PythonParses(_Assertion):
    """The code (first fenced block, else the whole content) parses with `ast`; never executed."""

    type: Literal["python-parses"]
    defines: tuple[str, ...] = ()


class UsageAccounting(_Assertion):
    """Usage is reported and adds up; prompt tokens equal the baseline's (template drift)."""

    type: Literal["usage"]
    match_baseline_prompt_tokens: bool = True
    max_completion_tokens: int | None = Field(default=None, ge=0)


Assertion = Annotated[
    Equals
    | Contains
    | NotContains
    | Regex
    | IsJson
    | JsonSchema
    | ToolCall
    | NoToolCall
    | FinishReason
    | MaxLength
    | MinLength
    | Script
    | Language
    | NoDegeneration
    | Refusal
    | NoRefusal
    | MatchesBaseline
    | PythonParses
    | UsageAccounting,
    Field(discriminator="type"),
]
