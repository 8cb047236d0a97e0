"""The options of `servegate gate`, each declared once beside the field that holds its value.

`GateOptions` is what the command was given; `gate_options` adds every option to the command in
the order of the fields. `baseline record` asks some of the same questions: it takes their
declarations from `option(name)`, with the help worded for what recording does with them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import click

from servegate.cli.report_files import file_options
from servegate.config.durations import duration_seconds
from servegate.orchestration.runner import GATE_ORDER
from servegate.store.writer import DEFAULT_DB

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class Declared:
    """One command-line option as click declares it: its names and its settings."""

    decls: tuple[str, ...]
    attrs: Mapping[str, Any]

    def __call__(self, command: F) -> F:
        return click.option(*self.decls, **self.attrs)(command)

    def worded(self, help: str, **attrs: Any) -> Declared:
        """The same option, its help (and any setting given here) worded for another command."""
        return Declared(self.decls, {**self.attrs, "help": help, **attrs})


def _option(*decls: str, **attrs: Any) -> dict[str, Any]:
    """The metadata of a GateOptions field: its option (the parameter name is the field's)."""
    return {"option": Declared(decls, attrs)}


def _file_option(fmt: str) -> dict[str, Any]:
    """The metadata of a report file field, `--<fmt> FILE` (report_files.py declares it)."""
    return {"option": file_options(fmt)}


_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


class Duration(click.ParamType[Any, Any]):
    """Seconds, written `300`, `300s`, `5m`, `4m30s` or `1h`: more than 0."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = (
            float(value) if isinstance(value, float | int) else duration_seconds(str(value).lower())
        )
        if seconds is None:
            self.fail(f"{value!r} is not a duration (300, 300s, 5m, 4m30s, 1h)", param, ctx)
        if not 0 < seconds < float("inf"):
            self.fail(f"{value!r}: a duration must be more than 0 seconds", param, ctx)
        return seconds


@dataclass(frozen=True, kw_only=True)
class GateOptions:
    """What `servegate gate` was given, one field per option, in the order `--help` lists them."""

    config_path: Path | None = field(
        metadata=_option(
            "--config",
            "config_path",
            type=_FILE,
            default=None,
            help="A YAML file with the run's settings (keys: docs/config.md, `servegate policy "
            "--config-keys`; baseline and candidate with url or a launch block, matrix, gates, "
            "policy, ...); options given on the command line override it.",
        )
    )
    baseline_url: str | None = field(
        metadata=_option(
            "--baseline",
            "baseline_url",
            default=None,
            metavar="URL",
            help="Baseline OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.",
        )
    )
    candidate_url: str | None = field(
        metadata=_option(
            "--candidate",
            "candidate_url",
            default=None,
            metavar="URL",
            help="Candidate base URL (the change under test). --baseline and --candidate are "
            "required unless --resume is given.",
        )
    )
    replica_url: str | None = field(
        metadata=_option(
            "--baseline-replica",
            "replica_url",
            default=None,
            metavar="URL",
            help="A second baseline server: its disagreement joins the A/A noise floor.",
        )
    )
    model: str | None = field(
        metadata=_option(
            "--model", default=None, help="Model name to send (default: first model both list)."
        )
    )
    json_path: Path | None = field(metadata=_file_option("json"))
    html_path: Path | None = field(metadata=_file_option("html"))
    markdown_path: Path | None = field(metadata=_file_option("markdown"))
    junit_path: Path | None = field(metadata=_file_option("junit"))
    api_key_env: str | None = field(
        metadata=_option(
            "--api-key-env",
            default=None,
            metavar="VAR",
            help="Environment variable holding the API key for both sides.",
        )
    )
    baseline_api_key_env: str | None = field(
        metadata=_option(
            "--baseline-api-key-env", default=None, metavar="VAR", help="Key variable, baseline."
        )
    )
    candidate_api_key_env: str | None = field(
        metadata=_option(
            "--candidate-api-key-env", default=None, metavar="VAR", help="Key variable, candidate."
        )
    )
    gate_names: str = field(
        metadata=_option(
            "--gates",
            "gate_names",
            default=",".join(GATE_ORDER),
            show_default=True,
            help="Comma-separated gates to run, in order.",
        )
    )
    suite: Path | None = field(
        metadata=_option(
            "--suite",
            type=_FILE,
            help="A golden-suite YAML file instead of the shipped default.",
        )
    )
    categories: tuple[str, ...] = field(
        metadata=_option(
            "--category",
            "categories",
            multiple=True,
            help="Only run golden probes of this category (repeatable), e.g. canary.",
        )
    )
    policy_path: Path | None = field(
        metadata=_option(
            "--policy",
            "policy_path",
            type=_FILE,
            help="Verdict policy YAML overriding the defaults.",
        )
    )
    deadline_s: float = field(
        metadata=_option(
            "--deadline-s",
            default=60.0,
            show_default=True,
            type=float,
            help="Total deadline per probe request (a hung server becomes a timeout finding).",
        )
    )
    probe_deadline_s: float = field(
        metadata=_option(
            "--probe-deadline-s",
            default=15.0,
            show_default=True,
            type=float,
            help="Deadline for start-up probes (readiness, the impossible request).",
        )
    )
    run_deadline_s: float = field(
        metadata=_option(
            "--run-deadline-s",
            default=1800.0,
            show_default=True,
            type=float,
            help="Deadline for the whole run; finished gates keep their results, the running one "
            "is inconclusive.",
        )
    )
    budget: float | None = field(
        metadata=_option(
            "--budget",
            default=None,
            type=Duration(),
            help="Plan the run to fit this time (300, 5m, 4m30s): numerics' probes and prompt "
            "scoring, the sampling plan's draws and the performance gate's blocks are sized "
            "to the time left, from the speed the gates so far measured; golden, context and "
            "startup run whole. Each gate's report says what it was given and which power that "
            "gave up. A plan, not a deadline. Default: every gate at full power.",
        )
    )
    strict: bool = field(
        metadata=_option(
            "--strict",
            is_flag=True,
            help="Any check that could not be measured makes its gate inconclusive (by default "
            "only a gate's core measurements do; the others are listed as not measured).",
        )
    )
    complete: bool = field(
        metadata=_option(
            "--complete",
            is_flag=True,
            help="Run every gate even after a correctness gate failed on a critical finding "
            "(degenerate output where the baseline's is fine, a hang). By default the run fails "
            "fast there, exit 1, and the report lists the gates not run and why.",
        )
    )
    hung_after: int = field(
        metadata=_option(
            "--hung-after",
            default=2,
            show_default=True,
            type=click.IntRange(min=1),
            help="Timeouts in a row after which a side gets no more requests in a gate.",
        )
    )
    impossible_words: int = field(
        metadata=_option(
            "--impossible-words",
            default=12_000,
            show_default=True,
            type=int,
            help="Words in the over-long prompt that must be rejected (set above the context).",
        )
    )
    numerics_prompts: int = field(
        metadata=_option(
            "--numerics-prompts",
            default=12,
            show_default=True,
            type=click.IntRange(min=1),
            help="How many of the shipped numerics prompts to send (fewer is faster, less "
            "thorough).",
        )
    )
    perf_concurrency: int = field(
        metadata=_option(
            "--perf-concurrency",
            default=4,
            show_default=True,
            type=click.IntRange(min=1),
            help="Performance gate: requests in flight per side (closed loop).",
        )
    )
    perf_blocks: int = field(
        metadata=_option(
            "--perf-blocks",
            default=6,
            show_default=True,
            type=click.IntRange(min=1),
            help="Performance gate: load blocks per side, interleaved A B, B A, ...",
        )
    )
    perf_max_blocks: int = field(
        metadata=_option(
            "--perf-max-blocks",
            default=12,
            show_default=True,
            type=click.IntRange(min=1),
            help="Performance gate: the most blocks per side; 2 more a side per look while "
            "TTFT, E2EL or throughput is undecided.",
        )
    )
    perf_requests: int = field(
        metadata=_option(
            "--perf-requests",
            default=8,
            show_default=True,
            type=click.IntRange(min=1),
            help="Performance gate: measured requests per block.",
        )
    )
    perf_output_tokens: int = field(
        metadata=_option(
            "--perf-output-tokens",
            default=24,
            show_default=True,
            type=click.IntRange(min=1),
            help="Performance gate: max_tokens of each (greedy, synthetic) request.",
        )
    )
    slo_text: str | None = field(
        metadata=_option(
            "--slo",
            "slo_text",
            default=None,
            metavar="SLO",
            help="Performance gate: also find each side's max concurrency under this SLO, e.g. "
            "ttft_ms=500,tpot_ms=50,e2el_ms=5000 (a sweep after the blocks; none without an SLO).",
        )
    )
    capacity_concurrency: str | None = field(
        metadata=_option(
            "--capacity-concurrency",
            default=None,
            metavar="N,N,...",
            help="Performance gate with --slo: the ascending concurrencies of the sweep "
            "[default: 1,2,4,8].",
        )
    )
    capacity_requests: int | None = field(
        metadata=_option(
            "--capacity-requests",
            default=None,
            type=click.IntRange(min=1, max=1024),
            help="Performance gate with --slo: measured requests per sweep step and side "
            "[default: 16].",
        )
    )
    db: str = field(
        metadata=_option(
            "--db",
            default=str(DEFAULT_DB),
            show_default=True,
            metavar="PATH|URL",
            help="Where runs are recorded (SQLite path or SQLAlchemy URL).",
        )
    )
    no_store: bool = field(
        metadata=_option("--no-store", is_flag=True, help="Do not record the run.")
    )
    baseline_run: str | None = field(
        metadata=_option(
            "--baseline-run",
            "baseline_run",
            default=None,
            metavar="NAME",
            help="Compare with a stored baseline (`servegate baseline record`) instead of "
            "--baseline: its server may be gone. Refused when the suite, policy, model or "
            "servegate version differ from its recording; the performance gate is not applicable "
            "to it (skipped with its reason).",
        )
    )
    run_dir: Path = field(
        metadata=_option(
            "--run-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path(".servegate") / "runs",
            show_default=True,
            help="Where the logs of engines servegate launches go (a folder per run).",
        )
    )
    log_patterns: Path | None = field(
        metadata=_option(
            "--log-patterns",
            type=_FILE,
            default=None,
            help="A YAML catalogue of start-up log patterns added to the shipped one.",
        )
    )
    resume_ref: str | None = field(
        metadata=_option(
            "--resume",
            "resume_ref",
            default=None,
            metavar="RUN",
            help="Continue a killed or crashed run (its id from `servegate runs`): the gates it "
            "finished keep their results, the others run again. Give it alone to reuse the run's "
            "stored configuration, or with the command line that started the run; refused when the "
            "configuration, an endpoint's models or the suite changed.",
        )
    )
    run_name: str | None = field(
        metadata=_option(
            "--name", "run_name", default=None, help="A name for this run in `servegate runs`."
        )
    )
    quiet: bool = field(
        metadata=_option(
            "--quiet", "-q", is_flag=True, help="No progress display and no table; exit code only."
        )
    )
    show_info: bool = field(
        metadata=_option("--show-info", is_flag=True, help="Also list informational findings.")
    )


def gate_options(command: F) -> F:
    """Add every option of GateOptions to `command`, listed in the order of its fields."""
    for f in reversed(fields(GateOptions)):
        command = f.metadata["option"](command)
    return command


def option(name: str) -> Declared:
    """The declaration of GateOptions' option `name` (a field name), to word for a command."""
    [declared] = [f.metadata["option"] for f in fields(GateOptions) if f.name == name]
    if not isinstance(declared, Declared):
        raise TypeError(f"{name} is declared elsewhere (report_files.py)")
    return declared
