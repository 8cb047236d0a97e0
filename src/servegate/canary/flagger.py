"""Flagger webhooks answered from the canary's current judgement (docs/deploy.md).

Flagger POSTs `{"name", "namespace", "phase", "checksum", "metadata"}` to each webhook and reads
only the status: 200-202 lets the analysis go on, anything else halts it and counts a failed
check (Flagger's docs/gitbook/usage/webhooks.md, v1.44.0). Mounted by `servegate proxy`:

- `pre-rollout`: go unless servegate has rolled the candidate back;
- `rollout`: go only when the candidate passed its last judged interval (or was promoted); a hold
  or no judgement yet halts (503), a rollback halts (409) — Flagger rolls back once its own
  failed-check threshold is reached;
- `confirm-promotion`: 200 only once servegate has promoted the candidate to 100 %, else 503
  (Flagger keeps running its checks and waits);
- `rollback`: Flagger's rollback hook stops the analysis and fails the canary on a 2xx, so it
  answers 200 exactly when servegate has rolled back, and 409 otherwise;
- `post-rollout` (state-changing: only on the admin address or with the admin bearer token,
  else 403): Flagger is done (phase Succeeded or Failed) and has scaled its canary
  Deployment to zero, its primary now running whichever version won. servegate ends its canary
  (`finalised`: every request to the primary, recorded with Flagger's payload), so a promoted
  canary no longer sends users to a service with no pods. 200 once finalised; Flagger only logs
  the answer.

A controller that failed safe (it could not compute or record a decision: every request goes to
the primary) makes every hook answer 503, "not ready".

After `finalised` the decision hooks answer 503 (409 for `rollback`): that session judged its
rollout; the next rollout needs a new proxy session (`--session`).

The body always says why, in one line, beside the state it was read from.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

Snapshot = Callable[[], Mapping[str, Any]]
# Ends the canary (reason, evidence) -> the decision taken; None where no canary is behind.
Finish = Callable[[str, Mapping[str, Any]], Awaitable[object]]
# Why a request may not change state (None: it may); post-rollout asks it first.
Admit = Callable[[Request], "str | None"]


def _nobody(_request: Request) -> str | None:
    return "state-changing endpoint: no admin access is configured"


MAX_BODY_BYTES = 64 * 1024
FIELDS = ("name", "namespace", "phase")
HOOKS = ("pre-rollout", "rollout", "confirm-promotion", "rollback")  # read the judgement only
FINISH_HOOK = "post-rollout"  # ends the canary


class PayloadError(ValueError):
    """A request body that is not Flagger's webhook payload."""


async def _read(request: Request) -> bytes:
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:  # never held whole: a webhook payload is small
            raise PayloadError(f"body over {MAX_BODY_BYTES} bytes")
    return bytes(raw)


def _payload(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise PayloadError("body is not JSON") from None
    if not isinstance(body, dict):
        raise PayloadError("body is not a JSON object")
    for name in FIELDS:
        if not isinstance(body.get(name), str):
            raise PayloadError(f"field {name!r} missing or not a string")
    metadata = body.get("metadata", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise PayloadError("field 'metadata' is not a map of strings")
    return body


async def _body_or_refusal(request: Request) -> dict[str, Any] | JSONResponse:
    """Flagger's payload, or the 400 that refuses a body that is not one."""
    try:
        return _payload(await _read(request))
    except PayloadError as exc:
        return JSONResponse({"go": False, "reason": f"bad webhook payload: {exc}"}, 400)


def decide(hook: str, state: Mapping[str, Any]) -> tuple[int, str]:
    """The status and the one-line reason for `hook` given the controller's snapshot."""
    phase = state.get("phase")
    last = state.get("last_decision") or {}
    action, reason = last.get("action"), last.get("reason", "")
    weight = _percent(state.get("weight"))
    if state.get("fault"):
        return 503, (
            f"servegate's canary failed safe ({state['fault']}): every request goes to the "
            "primary; not ready until the proxy is restarted"
        )
    if phase == "finalised":
        return (409 if hook == "rollback" else 503), (
            f"servegate's canary was finalised ({reason}); a new rollout needs a new session"
        )
    if phase not in ("progressing", "promoted", "rolled_back"):
        # No canary behind these routes (a shadow proxy, say): nothing judged is never a go.
        return (409 if hook == "rollback" else 503), "servegate has no canary judgement here"
    if hook == "rollback":
        if phase == "rolled_back":
            return 200, f"servegate rolled the candidate back: {reason}"
        return 409, f"servegate has not rolled back (phase {phase}, weight {weight})"
    if phase == "rolled_back":
        return 409, f"servegate rolled the candidate back: {reason}"
    if hook == "pre-rollout":
        return 200, f"servegate canary {phase} at {weight}"
    if hook == "confirm-promotion":
        if phase == "promoted":
            return 200, f"servegate promoted the candidate: {reason}"
        return 503, f"servegate has not promoted yet (phase {phase}, weight {weight})"
    if phase == "promoted":
        return 200, f"servegate promoted the candidate: {reason}"
    if action in ("promote", "complete"):
        return 200, f"the candidate passed its last interval: {reason}"
    if action == "hold":
        return 503, f"servegate holds at {weight}: {reason}"
    return 503, f"servegate has not judged an interval yet (weight {weight})"


def _percent(value: Any) -> str:
    return f"{value:g} %" if isinstance(value, int | float) else "unknown"


def _finish_reason(body: Mapping[str, Any], before: Mapping[str, Any]) -> str:
    was = f"servegate was {before.get('phase')} at {_percent(before.get('weight'))}"
    return (
        f"Flagger finished {body['namespace']}/{body['name']} ({body['phase']}) and scaled its "
        f"canary to zero; every request now goes to the primary ({was})"
    )


def flagger_routes(
    snapshot: Snapshot,
    prefix: str = "/servegate/flagger",
    finish: Finish | None = None,
    admit: Admit = _nobody,
) -> list[Route]:
    """Routes for Flagger's pre-rollout, rollout, confirm-promotion and rollback webhooks
    (POST `{prefix}/{hook}`), each answered from `snapshot()` — the canary controller's, read at
    the time of the call — and for its post-rollout hook, which calls `finish` once `admit`
    lets the request change state (by default nobody: 403)."""

    async def post_rollout(request: Request) -> JSONResponse:
        refused = admit(request)
        if refused is not None:
            return JSONResponse({"go": False, "reason": refused, "hook": FINISH_HOOK}, 403)
        body = await _body_or_refusal(request)
        if isinstance(body, JSONResponse):
            return body
        before = dict(snapshot())
        if finish is None or before.get("phase") not in ("progressing", "promoted", "rolled_back"):
            finalised = before.get("phase") == "finalised"
            why = "already finalised" if finalised else "servegate has no canary judgement here"
            return JSONResponse({"go": finalised, "reason": why}, 200 if finalised else 409)
        reason = _finish_reason(body, before)
        payload = {k: body[k] for k in (*FIELDS, "checksum") if k in body}
        await finish(reason, {"flagger": payload})
        fault = snapshot().get("fault")
        if fault:  # every request goes to the primary, but the store does not know it
            return JSONResponse({"go": False, "reason": f"servegate failed safe: {fault}",
                                 "hook": FINISH_HOOK, "canary": payload}, 503)  # fmt: skip
        return JSONResponse({"go": True, "reason": reason, "hook": FINISH_HOOK, "canary": payload})

    def endpoint(hook: str) -> Callable[[Request], Any]:
        async def answer(request: Request) -> JSONResponse:
            body = await _body_or_refusal(request)
            if isinstance(body, JSONResponse):
                return body
            state = dict(snapshot())
            status, reason = decide(hook, state)
            last = state.get("last_decision") or {}
            return JSONResponse(
                {
                    "go": 200 <= status <= 202,
                    "reason": reason,
                    "hook": hook,
                    "canary": {k: body[k] for k in (*FIELDS, "checksum") if k in body},
                    "servegate": {
                        "phase": state.get("phase"),
                        "weight": state.get("weight"),
                        "step_index": state.get("step_index"),
                        "action": last.get("action"),
                        "score": last.get("score"),
                    },
                },
                status,
            )

        return answer

    return [
        *(
            Route(f"{prefix}/{hook}", endpoint(hook), methods=["POST"], name=f"flagger-{hook}")
            for hook in HOOKS
        ),
        Route(f"{prefix}/{FINISH_HOOK}", post_rollout, methods=["POST"], name="flagger-finish"),
    ]
