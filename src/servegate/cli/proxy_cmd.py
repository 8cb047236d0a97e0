"""`servegate proxy`: serve users from the primary, mirror a sample to the candidate, compare."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from servegate.cli.console import fail

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from servegate.canary.controller import Controller
    from servegate.canary.plan import CanaryPlan
    from servegate.config.models import Policy
    from servegate.proxy import ProxySettings

HELP = """Put servegate in front of your engine: every request is forwarded to --primary and its
answer streamed back unchanged (status, headers, bytes, SSE timing). In shadow mode a sampled
share (--sample) of /v1/chat/completions, /v1/completions and /v1/embeddings requests is also
sent to --candidate in the background, through a bounded queue (a full queue drops the mirror,
counted; the user never waits for the candidate). Each mirrored pair is compared as the gates
compare (temperature-0 exact match and first divergence, degeneration, JSON and tool-call
parsing, latency) and recorded in --db: the comparison always, the prompts and answers only with
--store-bodies redacted|full (credentials, cookies, key-like strings redacted unless full); pairs
older than --retention-days are deleted; the files are created owner-only.

The proxy's own endpoints: GET /servegate/metrics (Prometheus: content metrics of both sides,
error/timeout counts, TTFT/E2EL histograms, exact-match counts, mirror queue depth and drops),
GET /servegate/healthz, and GET /servegate/sampled: the latest 5,000 sampled (temperature > 0)
pairs judged as distributions — degenerate, empty and unparsable answers, stopping, length,
symbols and the openings of repeated requests, by exact tests at --policy's `sampling.*` keys
(docs/proxy.md). Upstreams come only from these options; the user's Authorization
never reaches the candidate, which gets its own key from --candidate-key-env.

In canary mode (--mode canary) users get the candidate's answer for a share of those requests:
the share starts at the first of --steps (percent), each --interval the candidate's answers are
judged against the primary's (--policy, `canary.*` keys) and the share moves to the next step,
holds, or rolls back to 0 %; every decision is recorded in --db with its evidence, and a
restarted proxy resumes the session's canary where it stood. Flagger's webhooks are answered at
POST /servegate/flagger/{pre-rollout,rollout,confirm-promotion,rollback}; post-rollout, which
ends the canary, only on --admin-listen (loopback by default) or with the --admin-token-env token.

\b
Example:
  servegate proxy --primary http://10.0.0.5:8000/v1 --candidate http://10.0.0.6:8000/v1 \\
      --sample 0.05 --listen 0.0.0.0:8080
  servegate proxy --mode canary --steps 1,10,50,100 --interval 60s \\
      --primary http://10.0.0.5:8000/v1 --candidate http://10.0.0.6:8000/v1
  # clients use http://PROXY:8080/v1 as their OpenAI base URL
"""

DEFAULT_STEPS = "1,10,50,100"
DEFAULT_INTERVAL = "60s"
DEFAULT_ADMIN_LISTEN = "127.0.0.1:8081"


def _listen(value: str, option: str = "--listen") -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}", param_hint=option)
    return host.strip("[]"), int(port)


def _key(var: str | None, option: str = "--candidate-key-env") -> str | None:
    """The key in `var`, checked as the gate checks its own (exit 2 naming the variable)."""
    from servegate.endpoints.errors import EndpointError
    from servegate.endpoints.http import api_key_from

    if var is None:
        return None
    try:
        return api_key_from(var, "key")
    except EndpointError as exc:
        fail(f"{option}: {exc}", 2)


def _bind(host: str, port: int, option: str, text: str) -> socket.socket:
    try:
        return socket.create_server((host, port))
    except OSError as exc:
        fail(f"{option} {text}: cannot listen: {exc.strerror or exc}", 2)


@click.command("proxy", help=HELP)
@click.option("--primary", required=True, help="The engine users are served from (…/v1).")
@click.option("--candidate", required=True, help="The engine under test (…/v1).")
@click.option(
    "--mode",
    type=click.Choice(["shadow", "canary"]),
    default="shadow",
    show_default=True,
    help="shadow: users always get the primary; canary: a controller routes a share to the "
    "candidate.",
)
@click.option(
    "--sample",
    type=click.FloatRange(0.0, 1.0),
    default=0.05,
    show_default=True,
    help="Share of mirrorable requests also sent to the candidate (shadow mode).",
)
@click.option("--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT (0: any).")
@click.option(
    "--steps",
    default=None,
    help=f"Canary mode: the candidate's share of routable requests, percent, step by step, "
    f"ending at 100. Default: {DEFAULT_STEPS}.",
)
@click.option(
    "--interval",
    default=None,
    help=f"Canary mode: how long each step is judged (60s, 2m, 500ms). Default: "
    f"{DEFAULT_INTERVAL}.",
)
@click.option(
    "--policy",
    "policy_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Verdict policy YAML: its canary.* keys judge each canary interval; its sampling.* keys "
    "judge the sampled pairs (/servegate/sampled), in either mode.",
)
@click.option(
    "--secondary",
    default=None,
    help="Canary mode: a second primary replica, served as much as the candidate; the "
    "primary-vs-secondary difference is the noise floor each interval is judged against.",
)
@click.option(
    "--db",
    default=None,
    help="Where sessions and pairs are recorded: a SQLite path or a SQLAlchemy URL. "
    "Default: .servegate/servegate.db.",
)
@click.option("--session", "session_name", default="proxy", show_default=True, help="Session name.")
@click.option(
    "--capture",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append every mirrorable request, redacted, to this JSONL file (`servegate replay`).",
)
@click.option(
    "--candidate-key-env",
    default=None,
    metavar="VAR",
    help="Environment variable holding the candidate's API key.",
)
@click.option(
    "--max-body-bytes",
    type=click.IntRange(1),
    default=16 * 1024 * 1024,
    show_default=True,
    help="Larger request bodies are refused with 413.",
)
@click.option(
    "--queue-size", type=click.IntRange(1), default=256, show_default=True, help="Mirror queue."
)
@click.option(
    "--mirror-workers",
    type=click.IntRange(1),
    default=8,
    show_default=True,
    help="Candidate requests in flight at once.",
)
@click.option(
    "--candidate-timeout-s",
    type=click.FloatRange(0.001),
    default=60.0,
    show_default=True,
    help="A mirrored request gives up after this many seconds.",
)
@click.option(
    "--store-bodies",
    type=click.Choice(["none", "redacted", "full"]),
    default="none",
    show_default=True,
    help="What of prompts and answers reaches --db and --capture: none (the comparison, "
    "statuses and timings only), redacted (key-like strings and secret fields replaced) or full.",
)
@click.option(
    "--retention-days",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Recorded pairs older than this are deleted (at start and every hour).",
)
@click.option(
    "--max-body-reads",
    type=click.IntRange(1),
    default=16,
    show_default=True,
    help="Request bodies buffered at once; one more is answered 503 with Retry-After.",
)
@click.option(
    "--body-read-timeout-s",
    type=click.FloatRange(0.001),
    default=30.0,
    show_default=True,
    help="A request body not received in full within this many seconds is answered 408.",
)
@click.option(
    "--max-queued-bytes",
    type=click.IntRange(1),
    default=256 * 1024 * 1024,
    show_default=True,
    help="Bytes the mirror and record queues may hold together; beyond it a mirror or record "
    "is dropped (counted).",
)
@click.option(
    "--max-in-flight",
    type=click.IntRange(1),
    default=1024,
    show_default=True,
    help="User requests served at once; one more is answered 503 with Retry-After.",
)
@click.option(
    "--max-buffered-bytes",
    type=click.IntRange(1),
    default=256 * 1024 * 1024,
    show_default=True,
    help="Bytes the requests in flight may hold together (their bodies and the answer bytes "
    "kept to measure them); a body that would pass it is answered 503 with Retry-After, an "
    "answer past it is served but not measured.",
)
@click.option(
    "--primary-timeout-s",
    type=click.FloatRange(0.001),
    default=600.0,
    show_default=True,
    help="A primary's answer gives up after this many seconds in all (504 before its headers, "
    "a broken stream after); raise it for answers that take longer.",
)
@click.option(
    "--admin-listen",
    default=DEFAULT_ADMIN_LISTEN,
    show_default=True,
    help="Canary mode: HOST:PORT of the admin address, the only listener that serves "
    "state-changing endpoints (Flagger's post-rollout) without a token. Keep it on loopback, "
    "or reachable only by the rollout system (docs/deploy.md).",
)
@click.option(
    "--admin-token-env",
    default=None,
    metavar="VAR",
    help="Environment variable holding a bearer token that also admits state-changing "
    "requests on the user port (Authorization: Bearer <token>).",
)
@click.option("--seed", type=int, default=None, help="Seed of the sampling draw.")
def proxy_command(
    primary: str,
    candidate: str,
    mode: str,
    sample: float,
    listen: str,
    steps: str | None,
    interval: str | None,
    policy_path: Path | None,
    secondary: str | None,
    db: str | None,
    session_name: str,
    capture: Path | None,
    candidate_key_env: str | None,
    max_body_bytes: int,
    queue_size: int,
    mirror_workers: int,
    candidate_timeout_s: float,
    store_bodies: str,
    retention_days: float,
    max_body_reads: int,
    body_read_timeout_s: float,
    max_queued_bytes: int,
    max_in_flight: int,
    max_buffered_bytes: int,
    primary_timeout_s: float,
    admin_listen: str,
    admin_token_env: str | None,
    seed: int | None,
) -> None:
    from servegate.config.extras import MissingExtraError, require

    try:  # before any other import: the proxy's modules import the extra's packages
        require("proxy", "servegate proxy")
    except MissingExtraError as exc:
        fail(str(exc), exc.exit_code)

    from servegate.canary.deadline_rule import DeadlineRule
    from servegate.proxy import ProxySettings, ProxySettingsError, Upstream
    from servegate.proxy.admin import AdminAccess
    from servegate.proxy.app import Proxy
    from servegate.store.errors import StoreError
    from servegate.store.proxy_records import ProxyRecorder
    from servegate.store.writer import DEFAULT_DB, open_engine

    host, port = _listen(listen)
    policy = _policy(policy_path)
    try:
        settings = ProxySettings(
            primary=Upstream.parse("primary", primary),
            candidate=Upstream.parse("candidate", candidate),
            secondary=None if secondary is None else Upstream.parse("secondary", secondary),
            mode="canary" if mode == "canary" else "shadow",
            sample=sample,
            candidate_key=_key(candidate_key_env),
            max_body_bytes=max_body_bytes,
            queue_size=queue_size,
            mirror_workers=mirror_workers,
            candidate_timeout_s=candidate_timeout_s,
            max_body_reads=max_body_reads,
            store_bodies="full"
            if store_bodies == "full"
            else ("redacted" if store_bodies == "redacted" else "none"),
            retention_days=retention_days,
            body_read_timeout_s=body_read_timeout_s,
            max_queued_bytes=max_queued_bytes,
            max_in_flight=max_in_flight,
            max_buffered_bytes=max_buffered_bytes,
            primary_timeout_s=primary_timeout_s,
            seed=seed,
            candidate_deadlines=DeadlineRule()
            if mode != "canary"
            else DeadlineRule.from_policy(policy),
        )
    except ProxySettingsError as exc:
        fail(str(exc), 2)
    if settings.mode == "shadow":
        for flag, value in (("--steps", steps), ("--interval", interval),
                            ("--secondary", secondary)):  # fmt: skip
            if value is not None:
                fail(f"{flag} applies to --mode canary only; this proxy runs in shadow mode", 2)
    if capture is not None and settings.store_bodies == "none":
        fail("--capture writes request bodies: choose --store-bodies redacted or full", 2)
    if capture is not None and capture.parent and not capture.parent.is_dir():
        fail(f"--capture: folder {capture.parent} does not exist", 2)
    if capture is not None:
        from servegate.config.loader import ConfigError, writable_folder

        try:  # before anything listens: an unwritable capture would fail on the first request
            writable_folder(capture.parent, "--capture")
        except ConfigError as exc:
            fail(str(exc), 2)
    # Prompts, answers and the canary's evidence are users' data: every file this process
    # creates (the SQLite database, its -wal/-shm, the capture file) is owner-only.
    os.umask(0o077)
    _owner_only(str(db or DEFAULT_DB), capture)
    plan = _plan(steps, interval) if settings.mode == "canary" else None
    controller = None
    try:
        engine = open_engine(db or DEFAULT_DB)
        if plan is not None and policy is not None:
            controller = _controller(engine, session_name, settings, plan, policy)
        recorder = ProxyRecorder.open(
            engine,
            session_name,
            mode=settings.mode,
            primary_url=settings.primary.display,
            candidate_url=settings.candidate.display,
            config=settings.public()
            if plan is None
            else {**settings.public(), "steps": list(plan.steps), "interval_s": plan.interval_s},
        )
    except StoreError as exc:
        fail(str(exc), 2)
    token = _key(admin_token_env, "--admin-token-env")
    sock = _bind(host, port, "--listen", listen)
    sockets = [sock]
    admin_note = ""
    if controller is not None:  # only a canary has state to change
        admin_host, admin_port = _listen(admin_listen, "--admin-listen")
        admin_sock = _bind(admin_host, admin_port, "--admin-listen", admin_listen)
        sockets.append(admin_sock)
        admin_note = f"; admin endpoints on http://{admin_host}:{admin_sock.getsockname()[1]}"
    admin = AdminAccess.of(token, (s.getsockname()[:2] for s in sockets[1:]))
    proxy = Proxy(settings, controller=controller, recorder=recorder, capture=capture, admin=admin,
                  sampling=policy.sampling)  # fmt: skip
    bound = sock.getsockname()[1]
    if controller is None:
        how = f"shadow, sample {settings.sample:g}"
    else:
        state = controller.snapshot()
        how = (
            f"canary {state['phase']} at {state['weight']:g} % (step {state['step_index'] + 1} "
            f"of {len(controller.plan.steps)}), interval {controller.plan.interval_s:g} s"
        )
    click.echo(
        f"servegate proxy: listening on http://{host}:{bound}/v1 ({how}){admin_note}; "
        "metrics at /servegate/metrics",
        err=False,
    )
    _serve(proxy, sockets)


def _owner_only(db: str, capture: Path | None) -> None:
    """Files from an earlier run made readable to their owner only (new ones are, by umask)."""
    paths = [] if capture is None else [capture]
    if "://" not in db:
        paths += [Path(db + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
    for path in paths:
        try:
            if path.exists() and path.stat().st_mode & 0o077:
                path.chmod(0o600)
        except OSError as exc:
            fail(f"cannot make {path} owner-only: {exc.strerror or exc}", 2)


def _plan(steps: str | None, interval: str | None) -> CanaryPlan:
    from servegate.canary.plan import CanaryPlanError, parse_plan

    try:
        return parse_plan(steps or DEFAULT_STEPS, interval or DEFAULT_INTERVAL)
    except CanaryPlanError as exc:
        fail(str(exc), 2)


def _policy(path: Path | None) -> Policy:
    from servegate.config.loader import ConfigError, load_policy
    from servegate.config.models import Policy

    if path is None:
        return Policy()
    try:
        return load_policy(path)
    except ConfigError as exc:
        fail(f"--policy: {exc}", 2)


def _controller(
    engine: Engine, session: str, settings: ProxySettings, plan: CanaryPlan, policy: Policy
) -> Controller:
    """The session's canary: its recorder and saved state from the store, so a restarted proxy
    resumes at the step it stood on (a different --steps is refused)."""
    from servegate.canary.controller import Controller
    from servegate.canary.plan import CanaryPlanError
    from servegate.canary.record import open_canary_session

    recorder, state = open_canary_session(
        engine, session, plan,
        primary_url=settings.primary.display, candidate_url=settings.candidate.display,
    )  # fmt: skip
    try:
        return Controller(
            plan,
            policy,
            secondary=settings.secondary is not None,
            recorder=recorder,
            state=state,
        )
    except CanaryPlanError as exc:
        fail(f"session {session!r}: {exc}", 2)


def _serve(proxy: object, sockets: list[socket.socket]) -> None:
    import gc
    import importlib.util

    import uvicorn

    from servegate.proxy.app import Proxy
    from servegate.proxy.judging import SWITCH_INTERVAL_S

    assert isinstance(proxy, Proxy)
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # the event loop gets the GIL back soon
    # Start-up's objects (modules, the app, the store's metadata) leave the collector's
    # generations, so a full collection under load walks only what serving made: measured on an
    # idle machine, added E2EL p99 0.7-0.8 ms with the mirror off or at 5 % against 1.3-1.9 ms
    # without (benchmarks/RESULTS.md, "Shadow proxy on an idle machine, three trees").
    gc.collect()
    gc.freeze()
    config = uvicorn.Config(
        proxy.app(),
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # the client is the peer: X-Forwarded-For is appended, not trusted
        server_header=False,  # the upstream's Server and Date headers pass through
        date_header=False,
        lifespan="on",
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http="httptools" if importlib.util.find_spec("httptools") else "h11",
        timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run(sockets=sockets)
