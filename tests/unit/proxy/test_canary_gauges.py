"""The canary controller's snapshot as the proxy exports it: the weight in percent, as the
controller and --steps give it, and the phase and last action as 0/1 gauges."""

from __future__ import annotations

import math

from servegate.canary.controller import Controller
from servegate.canary.plan import parse_plan
from servegate.config.models import Policy
from servegate.proxy.exposition import ProxyMetrics


def _value(metrics: ProxyMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


def test_the_gauges_follow_the_controllers_snapshot_in_percent() -> None:
    now = [1000.0]
    controller = Controller(parse_plan("5,50,100", "10s"), Policy(), clock=lambda: now[0])
    metrics = ProxyMetrics(lambda: 0, 1)
    metrics.canary(controller.snapshot())
    assert _value(metrics, "servegate_proxy_canary_weight_percent") == 5.0
    assert _value(metrics, "servegate_proxy_canary_step_index") == 0.0
    assert _value(metrics, "servegate_proxy_canary_phase", phase="progressing") == 1.0
    assert _value(metrics, "servegate_proxy_canary_phase", phase="rolled_back") == 0.0
    assert _value(metrics, "servegate_proxy_canary_last_decision", action="hold") == 0.0
    assert math.isnan(_value(metrics, "servegate_proxy_canary_last_score"))

    now[0] += 10  # due with no answers at all: held, not promoted
    decision = controller.tick()
    assert decision is not None
    metrics.canary(controller.snapshot())
    assert _value(metrics, "servegate_proxy_canary_last_decision", action="hold") == 1.0
    assert _value(metrics, "servegate_proxy_canary_weight_percent") == 5.0


def test_the_weight_gauge_says_its_unit() -> None:
    [family] = [
        f
        for f in ProxyMetrics(lambda: 0, 1).registry.collect()
        if f.name == "servegate_proxy_canary_weight_percent"
    ]
    assert "percent (0-100)" in family.documentation
