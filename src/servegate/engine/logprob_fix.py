"""Correct and fast completion logprobs for the reference engine, patched into its server process.

llama-cpp-python 0.3.16 (`Llama._create_completion`) gets logprobs wrong in two ways:
- alignment: with `echo=True` it pairs prompt token i with `scores[i]`, the logits that predict
  token i+1, so on a model without BOS (SmolLM2) every echoed logprob belongs to the wrong token;
- speed: per token it sorts the whole 49,152-entry vocabulary in Python and re-detokenizes the
  prefix. Measured on 2 cores: echo of a 278-token prompt, logprobs=1: 24.2 s (1.9 s without
  logprobs); 24 generated tokens, logprobs=5: 2.17 s (0.35 s without).

`install(Llama)` wraps `Llama.create_completion` for non-streaming requests that ask for logprobs:
it runs the original with `logprobs=None` (same sampling, same text), records the tokens that
`Llama.generate` yielded, then computes the logprobs from `_scores` with `completion_logprobs`
(vectorised; row-wise log-softmax in float64 of only the rows needed). Streaming requests, infill
(`suffix`) and token-list prompts go to upstream unchanged.

Alignment: the token at absolute position a (BOS included when the model adds one) is scored by
row a-1; the first echoed token gets None, as in OpenAI's API. Generated token j sits at position
`usage.prompt_tokens + j`. Token strings, top-k keys and text offsets follow upstream: each token
detokenized on its own (special tokens render empty), offsets in characters of the decoded prefix.

Which tokens are reported: upstream already drops a final end-of-generation token
(`usage.completion_tokens` excludes it); of the rest, the longest run of leading tokens whose bytes
spell the start of the returned text. A stop sequence trims the text, so a token that runs past
its end is left out. Generation is never re-run (the prefix cache would change the numerics): when
the tokens do not explain the text, or the evaluated tokens differ from the recorded ones, one line
goes to stderr and the logprobs cover only the tokens that line up.
"""

from __future__ import annotations

import codecs
import functools
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

Detokenize = Callable[[list[int]], bytes]
Rows = npt.NDArray[np.floating[Any]]

# float64 rows of a chunk: 64 x 49,152 x 8 bytes = 25 MB, whatever the prompt length.
ROW_CHUNK = 64
_RECORDING = "_servegate_generated_tokens"
_INSTALLED = "_servegate_logprob_fix"


class CompletionLogprobs(TypedDict):
    """The `choices[i].logprobs` object of OpenAI's legacy completions API."""

    tokens: list[str]
    text_offset: list[int]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]


def completion_logprobs(
    tokens: Sequence[int],
    scores: Rows,
    k: int,
    detokenize: Detokenize,
    *,
    start: int = 0,
    text_offset: int = 0,
    echo: bool = False,
) -> CompletionLogprobs:
    """Logprobs of `tokens` at positions start, start+1, …; position a is scored by scores[a-1]."""
    if start < 0 or len(tokens) + start - 1 > len(scores):
        raise ValueError(
            f"{len(tokens)} tokens from position {start} need more than {len(scores)} rows"
        )
    piece = functools.cache(lambda token: detokenize([token]))
    strings = [piece(token).decode("utf-8", errors="ignore") for token in tokens]
    # The first token of a sequence has no row; an echoed first token gets None regardless.
    skipped = 1 if tokens and (echo or start == 0) else 0
    ids = np.asarray(tokens[skipped:], dtype=np.int64)
    first_row = start + skipped - 1
    chosen, top_ids, top_values = _score_rows(scores[first_row : first_row + len(ids)], ids, k)
    token_logprobs: list[float | None] = [None] * skipped
    top_logprobs: list[dict[str, float] | None] = [None] * skipped
    for string, value, row_ids, row_values in zip(
        strings[skipped:], chosen.tolist(), top_ids.tolist(), top_values.tolist(), strict=True
    ):
        top: dict[str, float] = {}
        for token, logprob in zip(row_ids, row_values, strict=True):
            # Distinct tokens may share a string (partial UTF-8 bytes): keep the likeliest.
            top.setdefault(piece(token).decode("utf-8", errors="ignore"), logprob)
        top[string] = value
        token_logprobs.append(value)
        top_logprobs.append(top)
    return {
        "tokens": strings,
        "text_offset": _text_offsets([piece(token) for token in tokens], text_offset),
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
    }


def _score_rows(
    rows: Rows, ids: npt.NDArray[np.int64], k: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Per row: logprob of ids[i], and the top-k token ids with their logprobs, likeliest first."""
    k = max(0, min(k, rows.shape[1]))
    chosen = np.empty(len(ids), dtype=np.float64)
    top_ids = np.empty((len(ids), k), dtype=np.int64)
    top_values = np.empty((len(ids), k), dtype=np.float64)
    for lo in range(0, len(ids), ROW_CHUNK):
        x = np.asarray(rows[lo : lo + ROW_CHUNK], dtype=np.float64)
        hi = lo + len(x)
        peak = x.max(axis=1, keepdims=True)
        peak[~np.isfinite(peak)] = 0.0
        log_norm = peak + np.log(np.exp(x - peak).sum(axis=1, keepdims=True))
        chosen[lo:hi] = x[np.arange(len(x)), ids[lo:hi]] - log_norm[:, 0]
        if k:
            candidates = np.argpartition(x, -k, axis=1)[:, -k:]
            values = np.take_along_axis(x, candidates, axis=1)
            order = np.lexsort((candidates, -values), axis=1)  # by value, ties by token id
            top_ids[lo:hi] = np.take_along_axis(candidates, order, axis=1)
            top_values[lo:hi] = np.take_along_axis(values, order, axis=1) - log_norm
    return chosen, top_ids, top_values


def _text_offsets(pieces: list[bytes], base: int) -> list[int]:
    # A character split across tokens counts once its last byte arrives, as upstream's
    # len(detokenize(prefix).decode(errors="ignore")) does.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")
    offsets = []
    for piece in pieces:
        offsets.append(base)
        base += len(decoder.decode(piece))
    return offsets


def spelled_prefix(tokens: Sequence[int], text: str, detokenize: Detokenize) -> tuple[int, bool]:
    """How many leading `tokens` spell the start of `text`, and whether they explain all of it.

    The text is explained when the counted tokens spell it exactly or it ends inside the next
    token (a stop sequence cut it there).
    """
    target = text.encode("utf-8")
    count, end = 0, 0
    for token in tokens:
        piece = detokenize([token])
        if target[end : end + len(piece)] != piece:
            rest = target[end:]
            return count, piece.startswith(rest)
        count, end = count + 1, end + len(piece)
    return count, end == len(target)


def install(llama_class: Any) -> None:
    """Patch `llama_class` (llama_cpp.Llama) so non-streaming completions get fixed logprobs."""
    if getattr(llama_class, _INSTALLED, False):
        return
    original_generate = llama_class.generate
    original_create = llama_class.create_completion
    signature = inspect.signature(original_create)

    def generate(self: Any, *args: Any, **kwargs: Any) -> Iterator[int]:
        inner = original_generate(self, *args, **kwargs)
        recorded: list[int] | None = getattr(self, _RECORDING, None)
        sent = None
        try:
            while True:
                try:
                    token = inner.send(sent)
                except StopIteration:
                    return
                if recorded is not None:
                    recorded.append(token)
                sent = yield token
        finally:
            inner.close()

    def create_completion(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        request = bound.arguments
        k = request["logprobs"]
        if (
            k is None
            or request["stream"]
            or request["suffix"] is not None
            or not isinstance(request["prompt"], str)
            or not getattr(self, "_logits_all", False)
        ):
            return original_create(self, *args, **kwargs)
        request["logprobs"] = None
        recorded: list[int] = []
        setattr(self, _RECORDING, recorded)
        try:
            response = original_create(*bound.args, **bound.kwargs)
        finally:
            setattr(self, _RECORDING, None)
        response["choices"][0]["logprobs"] = _response_logprobs(
            self, response, recorded, request["prompt"], k, echo=bool(request["echo"])
        )
        return response

    functools.update_wrapper(generate, original_generate)
    functools.update_wrapper(create_completion, original_create)
    llama_class.generate = generate
    llama_class.create_completion = create_completion
    setattr(llama_class, _INSTALLED, True)


def _response_logprobs(
    llama: Any, response: Any, recorded: list[int], prompt: str, k: int, *, echo: bool
) -> CompletionLogprobs:
    """The logprobs object for a finished non-streaming completion of `prompt`."""
    usage = response["usage"]
    n_prompt: int = usage["prompt_tokens"]
    generated = recorded[: usage["completion_tokens"]]  # drops a final end-of-generation token
    text: str = response["choices"][0]["text"]
    problems = []
    if len(generated) < usage["completion_tokens"]:
        problems.append(f"recorded {len(generated)} of {usage['completion_tokens']} tokens")
    if echo and not text.startswith(prompt):
        problems.append("echoed text does not start with the prompt")
    count, explained = spelled_prefix(
        generated, text[len(prompt) :] if echo else text, _pieces(llama)
    )
    if not explained:
        problems.append(f"{len(generated)} tokens do not spell the text ({count} do)")
    evaluated: list[int] = llama._input_ids.tolist()
    if len(evaluated) < n_prompt:
        problems.append(f"{len(evaluated)} evaluated tokens for a {n_prompt}-token prompt")
    agreeing = _common_prefix(evaluated[n_prompt:], generated)
    if agreeing < min(len(evaluated) - n_prompt, len(generated)):
        problems.append(f"evaluated tokens differ from the generated ones after {agreeing}")
        count = min(count, agreeing)
    # Generated token j is scored by row n_prompt-1+j: rows exist up to len(evaluated)-1.
    count = max(0, min(count, len(evaluated) - n_prompt + 1))
    if problems:
        print(f"servegate logprob fix: {'; '.join(problems)}", file=sys.stderr, flush=True)
    if not echo:
        return completion_logprobs(
            generated[:count],
            llama._scores,
            k,
            _pieces(llama),
            start=n_prompt,
            text_offset=len(prompt),
        )
    skip = 1 if _inserted_bos(llama, evaluated) else 0
    tokens = evaluated[skip:n_prompt] + generated[:count]
    return completion_logprobs(tokens, llama._scores, k, _pieces(llama), start=skip, echo=True)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _pieces(llama: Any) -> Detokenize:
    detokenize: Detokenize = llama.detokenize
    return detokenize


def _inserted_bos(llama: Any, evaluated: list[int]) -> bool:
    """Whether upstream put a BOS (or CLS) token in front of the prompt, as it decides that."""
    model = llama._model
    cls = model.token_cls()
    bos = cls if cls != -1 else llama.token_bos()
    return bool(model.add_bos_token()) and bos != -1 and evaluated[:1] == [bos]
