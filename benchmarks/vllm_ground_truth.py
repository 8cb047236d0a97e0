"""The independent ground truth for the vLLM paths (benchmarks/RESULTS-vllm.md): teacher-forced
NLL of servegate's reference texts, computed without servegate's gates.

Two sources, neither of them servegate's judgement:
- `transformers`: the converted model in-process with torch, at fp32 and at bf16 (the dtype paths
  vLLM runs); run it in a vLLM venv (it has torch and transformers):
      .venv-vllm-0.32.0/bin/python benchmarks/vllm_ground_truth.py transformers
- `server URL`: the same texts through a vLLM server's own `prompt_logprobs` (plain HTTP):
      .venv/bin/python benchmarks/vllm_ground_truth.py server http://127.0.0.1:8000/v1
- `pair BASELINE_URL CANDIDATE_URL`: the texts and their join (every text in name order, joined
  by a blank line: ~2,950 tokens, where a KV cache's error has room to grow) scored on two
  servers; ΔNLL (candidate − baseline) per token, with a standard error over 64-token chunks
  and the shift by thirds of the joined text:
      .venv/bin/python benchmarks/vllm_ground_truth.py pair http://127.0.0.1:8000/v1 http://127.0.0.1:8001/v1

Each prints one JSON line: per text, tokens and mean NLL (nats/token), and the token-weighted mean.
"""

from __future__ import annotations

import json
import math
import sys
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Any

MODEL = "smollm2-135m-instruct"


def reference_texts() -> dict[str, str]:
    folder = resources.files("servegate.probes").joinpath("reference")
    return {
        p.name.removesuffix(".txt"): p.read_text(encoding="utf-8")
        for p in sorted(folder.iterdir(), key=lambda p: p.name)
        if p.name.endswith(".txt")
    }


def _summary(per_text: dict[str, tuple[int, float]]) -> dict[str, Any]:
    tokens = sum(n for n, _ in per_text.values())
    total = sum(n * nll for n, nll in per_text.values())
    return {
        "texts": {k: {"tokens": n, "nll": round(v, 5)} for k, (n, v) in per_text.items()},
        "tokens": tokens,
        "mean_nll": round(total / tokens, 5),
    }


def transformers_nll() -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from servegate.engine.vllm_model import model_dir

    folder = model_dir()
    tok = AutoTokenizer.from_pretrained(str(folder))
    out: dict[str, Any] = {"model": str(folder)}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
        model.eval()
        per_text: dict[str, tuple[int, float]] = {}
        for key, text in reference_texts().items():
            ids = tok(text, return_tensors="pt").input_ids[:, :1024]
            with torch.no_grad():
                logits = model(ids).logits.float()
            logp = torch.log_softmax(logits[0, :-1], dim=-1)
            nll = -logp.gather(1, ids[0, 1:, None]).squeeze(1)
            per_text[key] = (int(nll.numel()), float(nll.mean()))
        out[name] = _summary(per_text)
    return out


def token_nlls(url: str, text: str) -> tuple[list[int], list[float]]:
    """The prompt's token ids and each token's NLL after the first, from `prompt_logprobs`."""
    body = {"model": MODEL, "prompt": text, "max_tokens": 1, "temperature": 0,
            "prompt_logprobs": 0, "return_token_ids": True}  # fmt: skip
    request = urllib.request.Request(
        f"{url}/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as resp:
        choice = json.loads(resp.read())["choices"][0]
    ids = choice["prompt_token_ids"]
    # Entry i holds prompt token i itself (keyed by its id) and the top-k; entry 0 is null.
    values = [
        -float(entry[str(token)]["logprob"])
        for token, entry in zip(ids[1:], choice["prompt_logprobs"][1:], strict=True)
    ]
    assert all(math.isfinite(v) for v in values), text[:40]
    return ids, values


def server_nll(url: str) -> dict[str, Any]:
    per_text: dict[str, tuple[int, float]] = {}
    for key, text in reference_texts().items():
        _, values = token_nlls(url, text)
        per_text[key] = (len(values), sum(values) / len(values))
    return _summary(per_text)


def _shift(base: list[float], cand: list[float], chunk: int = 64) -> dict[str, Any]:
    d = [c - b for b, c in zip(base, cand, strict=True)]
    means = [sum(d[i : i + chunk]) / len(d[i : i + chunk]) for i in range(0, len(d), chunk)]
    m = sum(d) / len(d)
    k = len(means)
    se = math.sqrt(sum((x - sum(means) / k) ** 2 for x in means) / (k - 1) / k) if k > 1 else 0.0
    third = math.ceil(len(d) / 3)
    return {
        "tokens": len(d),
        "dnll": round(m, 5),
        "se": round(se, 5),
        "z": round(m / se, 2) if se else None,
        "by_third": [
            round(sum(p) / len(p), 5) for i in range(3) if (p := d[i * third : (i + 1) * third])
        ],
        "baseline_nll": round(sum(base) / len(base), 5),
    }


def pair_nll(baseline: str, candidate: str) -> dict[str, Any]:
    texts = reference_texts()
    out: dict[str, Any] = {"baseline": baseline, "candidate": candidate, "texts": {}}
    for key, text in [*texts.items(), ("joined", "\n\n".join(texts.values()))]:
        ib, b = token_nlls(baseline, text)
        ic, c = token_nlls(candidate, text)
        if ib != ic:
            out["texts"][key] = {"tokenized_differently": [len(ib), len(ic)]}
            continue
        out["texts"][key] = _shift(b, c)
    return out


def main() -> None:
    if sys.argv[1] == "transformers":
        print(json.dumps(transformers_nll()))
    elif sys.argv[1] == "pair":
        print(json.dumps(pair_nll(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(server_nll(sys.argv[2])))


if __name__ == "__main__":
    main()
