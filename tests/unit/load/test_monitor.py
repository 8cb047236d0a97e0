import asyncio
import time

import pytest

from servegate.load import ClientEvidence, ClientMonitor, judge_client


def test_a_quiet_client_is_not_bound() -> None:
    load = judge_client(ClientEvidence(cpu_s=0.2, wall_s=2.0, loop_lag_ms=(0.1,) * 200))
    assert not load.client_bound
    assert load.reasons == ()
    assert load.cpu_share == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("evidence", "reason"),
    [
        (ClientEvidence(cpu_s=1.9, wall_s=2.0, loop_lag_ms=(0.1,) * 100), "client CPU 95%"),
        (ClientEvidence(cpu_s=0.1, wall_s=2.0, loop_lag_ms=(0.1,) * 90 + (50.0,) * 10), "lag p99"),
        (
            ClientEvidence(
                cpu_s=0.1,
                wall_s=2.0,
                loop_lag_ms=(0.1,),
                schedule_lag_ms=(0.5,) * 90 + (30.0,) * 10,
            ),
            "sent late",
        ),
    ],
    ids=["cpu", "loop-lag", "schedule-lag"],
)
def test_each_measured_limit_marks_the_client_bound_with_its_reason(
    evidence: ClientEvidence, reason: str
) -> None:
    load = judge_client(evidence)
    assert load.client_bound
    assert any(reason in r for r in load.reasons)


def test_no_measurement_is_not_client_bound() -> None:
    load = judge_client(ClientEvidence(cpu_s=0.0, wall_s=0.0, loop_lag_ms=()))
    assert not load.client_bound
    assert load.cpu_share is None


async def test_a_blocked_event_loop_shows_as_lag_and_busy_cpu() -> None:
    async with ClientMonitor(tick_s=0.005) as monitor:
        await asyncio.sleep(0.02)  # let the ticker start waiting
        end = time.process_time() + 0.08
        while time.process_time() < end:  # hold the loop (and a core) for 80 ms
            pass
        await asyncio.sleep(0.02)
    evidence = monitor.evidence()
    assert max(evidence.loop_lag_ms) >= 60.0
    assert evidence.cpu_s >= 0.08
    assert judge_client(evidence).client_bound
