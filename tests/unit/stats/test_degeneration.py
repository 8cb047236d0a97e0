import pytest

from servegate.stats.degeneration import (
    ABNORMAL,
    SYMBOL_RUN,
    degeneration_metrics,
    is_severe,
    severe_kind,
)


@pytest.mark.parametrize(
    "text",
    [
        "!!!!!!!!!!!!!!!!",
        ",,,,,,,,,,,,,,,,",
        "OK " + "the " * 12,
        "\ufffd\ufffd\ufffdabc\x00\x01\x02",
        "I like cats and dogs. " * 6,
        "a" * 30,
    ],
    ids=["bangs", "commas", "token-loop", "mojibake", "ngram-loop", "letter-run"],
)
def test_degenerate_text_is_severe(text: str) -> None:
    assert is_severe(degeneration_metrics(text)) is not None


@pytest.mark.parametrize(
    "text",
    [
        "OK",
        "The capital of France is Paris.",
        "苹果、香蕉和橙子是三种常见的水果。",
        "def add(a, b):\n    return a + b\n",
        "Wait... really?! Yes!!!",
        "1000000000",
        "",
    ],
    ids=["ok", "sentence", "chinese", "code", "some-punctuation", "big-number", "empty"],
)
def test_fluent_text_is_not_severe(text: str) -> None:
    assert is_severe(degeneration_metrics(text)) is None


def test_metrics_measure_the_longest_run_and_its_character() -> None:
    m = degeneration_metrics("ab,,,,,c")
    assert (m.longest_char_run, m.longest_char_run_char) == (5, ",")


def test_whitespace_only_output_counts_as_empty() -> None:
    assert degeneration_metrics("  \n ").empty
    assert not degeneration_metrics("x").empty


def test_repeated_ngram_ratio_is_zero_for_distinct_words() -> None:
    assert degeneration_metrics("one two three four five six").repeated_ngram_ratio == 0.0


def test_abnormal_ratio_counts_replacement_and_control_characters() -> None:
    m = degeneration_metrics("ab\ufffd\x00")
    assert m.abnormal_char_ratio == pytest.approx(0.5)


def test_a_run_of_replacement_characters_is_abnormal_not_a_symbol_run() -> None:
    # What a server that decodes split UTF-8 chunks alone streams for a Chinese answer: a run of
    # U+FFFD is broken decoding, a kind of its own, never excused by a baseline's `=====` rule.
    assert severe_kind(degeneration_metrics("\ufffd" * 24 + "\n")) == (
        ABNORMAL,
        "U+FFFD repeated 24 times in a row (broken text decoding)",
    )
    assert severe_kind(degeneration_metrics("=" * 24))[0] == SYMBOL_RUN  # type: ignore[index]


def test_a_few_replacement_characters_in_fluent_text_are_not_severe() -> None:
    # "25 °C" streamed through the split-UTF-8 bug: seen only as a stream/plain mismatch.
    assert is_severe(degeneration_metrics("It is 25 \ufffd\ufffdC in Paris today.")) is None
