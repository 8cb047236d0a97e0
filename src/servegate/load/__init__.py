"""Load generation against one endpoint: workloads as data, arrival processes, the driver that
sends them, and the metrics, correctness checks and self-measurement of every step.

Layering: `load` sits beside `gates` (it sees the `Endpoint` protocol, `stats` and `probes`);
the CLI and, later, the performance gate use it. Nothing here prints or exits.
"""

from servegate.load.arrival import Arrival, closed_loop, open_loop, ramp, send_offsets_s
from servegate.load.bench import bench, evaluate_step, step_bounds
from servegate.load.correctness import CorrectnessCounts, check_responses
from servegate.load.driver import Exchange, StepBounds, StepEvidence, run_step
from servegate.load.lengths import LengthCheck, check_lengths
from servegate.load.metrics import (
    DEFINITIONS,
    Distribution,
    RequestMeasure,
    Scalar,
    StepMetrics,
    measure,
    summarise,
)
from servegate.load.monitor import ClientEvidence, ClientLoad, ClientMonitor, judge_client
from servegate.load.replay import ReplayError, ReplayTraffic, read_replay
from servegate.load.result import SCHEMA_VERSION, BenchBounds, BenchResult, StepResult
from servegate.load.server_metrics import (
    ServerMetrics,
    ServerSampler,
    endpoint_scrape,
    summarise_server,
)
from servegate.load.slo import SLO, SLOError, parse_slo
from servegate.load.sweep import SweepLimit, sweep_limit
from servegate.load.workload import (
    GoldenWorkload,
    ReplayWorkload,
    SyntheticWorkload,
    WorkItem,
    Workload,
    WorkSource,
    golden_source,
    golden_workload,
    replay_source,
    replay_workload,
    synthetic_source,
)

__all__ = [
    "DEFINITIONS",
    "SCHEMA_VERSION",
    "SLO",
    "Arrival",
    "BenchBounds",
    "BenchResult",
    "ClientEvidence",
    "ClientLoad",
    "ClientMonitor",
    "CorrectnessCounts",
    "Distribution",
    "Exchange",
    "GoldenWorkload",
    "LengthCheck",
    "ReplayError",
    "ReplayTraffic",
    "ReplayWorkload",
    "RequestMeasure",
    "SLOError",
    "Scalar",
    "ServerMetrics",
    "ServerSampler",
    "StepBounds",
    "StepEvidence",
    "StepMetrics",
    "StepResult",
    "SweepLimit",
    "SyntheticWorkload",
    "WorkItem",
    "WorkSource",
    "Workload",
    "bench",
    "check_lengths",
    "check_responses",
    "closed_loop",
    "endpoint_scrape",
    "evaluate_step",
    "golden_source",
    "golden_workload",
    "judge_client",
    "measure",
    "open_loop",
    "parse_slo",
    "ramp",
    "read_replay",
    "replay_source",
    "replay_workload",
    "run_step",
    "send_offsets_s",
    "step_bounds",
    "summarise",
    "summarise_server",
    "sweep_limit",
    "synthetic_source",
]
