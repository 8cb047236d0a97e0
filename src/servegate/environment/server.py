"""What a server says about itself: `/version`, `/v1/models` (max context), `/metrics` info
series, llama.cpp's `/props` and TGI's `/info`. Each is optional; what a server does not serve
is listed under `server.not_served`, never guessed."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servegate.endpoints.protocol import Endpoint
from servegate.environment.vllm import kv_cache_fields

# Keys in a /v1/models entry that give the context length, by server.
CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")
_INFO_LINE = re.compile(r"^([A-Za-z_:][\w:]*_info)\{([^}]*)\}\s+1(?:\.0)?\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Per series: vLLM 0.32's cache_config_info alone has 38 labels (num_gpu_blocks among them).
MAX_METRIC_FIELDS = 60
DEADLINE_S = 5.0


@dataclass(frozen=True)
class ServerInfo:
    version: str | None = None
    environment: dict[str, str] = field(default_factory=dict)


def _json(resp: Any) -> Any:
    try:
        return resp.json() if resp.ok else None
    except ValueError:
        return None


def model_fields(listing: Any, model: str | None) -> dict[str, str]:
    """`server.max_context` (and where it came from) and owner of `model` in a /models answer."""
    data = listing.get("data") if isinstance(listing, Mapping) else None
    if not isinstance(data, list):
        return {}
    entries = [m for m in data if isinstance(m, Mapping)]
    entry = next((m for m in entries if m.get("id") == model), entries[0] if entries else None)
    if entry is None:
        return {}
    out: dict[str, str] = {}
    for key in CONTEXT_KEYS:
        if isinstance(entry.get(key), int):
            out["server.max_context"] = str(entry[key])
            out["server.max_context.source"] = f"/v1/models {key}"
            break
    meta = entry.get("meta")
    # llama-server lists the context the model was trained for, not the one it serves.
    if isinstance(meta, Mapping) and isinstance(meta.get("n_ctx_train"), int):
        out["server.n_ctx_train"] = str(meta["n_ctx_train"])
    if isinstance(entry.get("owned_by"), str):
        out["server.owned_by"] = entry["owned_by"]
    return out


def props_fields(props: Any) -> dict[str, str]:
    """llama-server's /props: build, context per slot, slots, model file, template digest."""
    if not isinstance(props, Mapping):
        return {}
    out: dict[str, str] = {}
    if isinstance(props.get("build_info"), str):
        out["server.build"] = props["build_info"]
    settings = props.get("default_generation_settings")
    if isinstance(settings, Mapping) and isinstance(settings.get("n_ctx"), int):
        out["server.max_context"] = str(settings["n_ctx"])
        out["server.max_context.source"] = "/props default_generation_settings.n_ctx"
    for key in ("total_slots", "model_path"):
        if isinstance(props.get(key), int | str):
            out[f"server.{key}"] = str(props[key])
    if isinstance(props.get("chat_template"), str):
        digest = hashlib.sha256(props["chat_template"].encode()).hexdigest()[:12]
        out["server.chat_template_sha256"] = digest
    return out


def metrics_fields(text: str) -> dict[str, str]:
    """Labels of Prometheus `*_info` series set to 1 (build info, cache config, ...)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        match = _INFO_LINE.match(line.strip())
        if match is None:
            continue
        name = match.group(1)
        for label, value in _LABEL.findall(match.group(2))[:MAX_METRIC_FIELDS]:
            out[f"metrics.{name}.{label}"] = value
    return out


def _version(doc: Any) -> str | None:
    if isinstance(doc, Mapping) and isinstance(doc.get("version"), str):
        return str(doc["version"])
    return None


async def server_info(ep: Endpoint, model: str | None) -> ServerInfo:
    """Ask the server about itself; nothing here fails a run."""
    env: dict[str, str] = {}
    missing: list[str] = []
    version_doc = _json(await ep.raw("GET", "../version", deadline_s=DEADLINE_S))
    version = _version(version_doc)
    if version is None:
        missing.append("/version")
    info = _json(await ep.raw("GET", "../info", deadline_s=DEADLINE_S))  # TGI
    if isinstance(info, Mapping):
        version = version or _version(info)
        for key in ("model_id", "model_sha", "model_dtype", "max_input_tokens", "sha"):
            if isinstance(info.get(key), str | int):
                env[f"server.info.{key}"] = str(info[key])
    env.update(model_fields(_json(await ep.raw("GET", "/models", deadline_s=DEADLINE_S)), model))
    props = _json(await ep.raw("GET", "../props", deadline_s=DEADLINE_S))
    if props is None:
        missing.append("/props")
    env.update(props_fields(props))
    metrics = await ep.raw("GET", "../metrics", deadline_s=DEADLINE_S)
    if metrics.ok:
        series = metrics_fields(metrics.body.decode("utf-8", "replace"))
        env.update(series)
        env.update(kv_cache_fields(series))
    else:
        missing.append("/metrics")
    if missing:
        env["server.not_served"] = ", ".join(missing)
    return ServerInfo(version=version, environment=env)
