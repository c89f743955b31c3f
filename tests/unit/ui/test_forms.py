"""The policy form is the schema: every field present, every value validated by it."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from backend.policies.schemas import PolicySpec
from backend.ui.forms import FIELDS, form_values, parse_policy_form, policy_groups
from backend.ui.templating import weight_split


def test_every_policy_field_is_on_the_form_once() -> None:
    names = [f.name for _, group in policy_groups() for f in group]
    assert sorted(names) == sorted(PolicySpec.model_fields)
    assert len(names) == len(set(names))


def test_the_defaults_round_trip() -> None:
    parsed = parse_policy_form(form_values(PolicySpec()))
    assert parsed.errors == {}
    assert parsed.spec == PolicySpec()


@given(
    weight=st.floats(0, 1),
    strategy=st.sampled_from(["least", "most"]),
    slo=st.none() | st.floats(0.001, 1e6),
    streaming=st.booleans(),
    tokens=st.integers(1, 1_000_000),
    penalty=st.floats(0, 86_400_000),
)
def test_any_valid_spec_round_trips_through_the_form(
    weight: float, strategy: str, slo: float | None, streaming: bool, tokens: int, penalty: float
) -> None:
    spec = PolicySpec(
        ttft_weight=weight,
        strategy=strategy,  # type: ignore[arg-type]
        default_ttft_slo_ms=slo,
        streaming_mode=streaming,
        expected_output_tokens=tokens,
        max_ttft_penalty_ms=penalty,
    )
    parsed = parse_policy_form(form_values(spec))
    assert parsed.spec == spec


def _form(**changes: str) -> dict[str, Any]:
    return {**form_values(PolicySpec()), **changes}


def test_each_bad_value_gets_its_own_message() -> None:
    parsed = parse_policy_form(
        _form(
            ttft_weight="1.5",
            epsilon_explore_neg="lots",
            expected_output_tokens="2.5",
            default_tpot_slo_ms="-1",
            strategy="sideways",
            transfer_same_host_gbps="",
        )
    )
    assert parsed.spec is None
    assert parsed.errors == {
        "ttft_weight": "Input should be less than or equal to 1",
        "epsilon_explore_neg": "Input should be a valid number, unable to parse string as a number",
        "expected_output_tokens": "Input should be a valid integer, unable to parse string as an "
        "integer",
        "default_tpot_slo_ms": "Input should be greater than 0",
        "strategy": "Input should be 'least' or 'most'",
        "transfer_same_host_gbps": "A value is required.",
    }
    # What was typed is kept, to show again.
    assert parsed.values["epsilon_explore_neg"] == "lots"


def test_an_unticked_checkbox_means_false_and_an_empty_slo_means_none() -> None:
    form = _form(default_ttft_slo_ms="", default_tpot_slo_ms="80")
    del form["streaming_mode"]
    parsed = parse_policy_form(form)
    assert parsed.spec is not None
    assert parsed.spec.streaming_mode is False
    assert parsed.spec.default_ttft_slo_ms is None
    assert parsed.spec.default_tpot_slo_ms == 80


def test_unknown_fields_are_ignored_not_stored() -> None:
    parsed = parse_policy_form(_form(csrf_token="x", trace="azure-code", evil="1"))
    assert parsed.spec == PolicySpec()


def test_fields_know_their_limits() -> None:
    assert FIELDS["ttft_weight"].kind == "weight"
    assert FIELDS["strategy"].choices == ("least", "most")
    assert FIELDS["expected_output_tokens"].limits == ">= 1, <= 1,000,000"
    assert FIELDS["default_ttft_slo_ms"].kind == "optional_number"
    assert "`" not in FIELDS["default_ttft_slo_ms"].description


def test_the_weighting_shows_both_numbers() -> None:
    assert weight_split("0.8") == (80, 20)
    assert weight_split("0.555") == (56, 44)
    assert weight_split("1") == (100, 0)
    assert weight_split("lots") is None
    assert weight_split("1.5") is None
