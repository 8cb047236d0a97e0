from servegate.probes import CATEGORIES, default_suite


def test_the_shipped_suite_loads() -> None:
    suite = default_suite()
    assert suite.name == "default"
    assert len(suite.probes) >= 30


def test_every_golden_category_is_covered() -> None:
    assert set(default_suite().categories()) == set(CATEGORIES)


def test_canaries_come_first_and_are_critical() -> None:
    suite = default_suite()
    assert suite.probes[0].id == "canary-ok"
    assert all(p.severity == "critical" for p in suite.probes if p.category == "canary")


def test_chinese_is_the_first_multilingual_probe() -> None:
    first = next(p for p in default_suite().probes if p.category == "multilingual")
    assert "zh" in first.id


def test_the_suite_stays_cheap_for_a_cpu_reference_engine() -> None:
    suite = default_suite()
    assert suite.total_max_tokens() < 4000
    assert all(0 < p.request["max_tokens"] <= 256 for p in suite.probes)


def test_every_probe_is_greedy_and_leaves_the_model_to_servegate() -> None:
    for probe in default_suite().probes:
        assert probe.request["temperature"] == 0
        assert "model" not in probe.request


def test_tool_choice_variants_are_all_probed() -> None:
    choices = {
        str(p.request.get("tool_choice")) for p in default_suite().probes if p.category == "tools"
    }
    assert {"auto", "required", "none"} <= choices
    assert any("get_time" in c for c in choices)


def test_both_json_response_formats_are_probed() -> None:
    formats = {
        p.request["response_format"]["type"]
        for p in default_suite().probes
        if "response_format" in p.request
    }
    assert formats == {"json_object", "json_schema"}
