"""The typed catalog options (engines/options.py): every kind of mistake is refused with the option named."""

from __future__ import annotations

import pytest
from pydantic import Field, ValidationError

from engines.errors import InvalidArgumentError
from engines.options import EngineOptions, QueuedEngineOptions, TorchEngineOptions, parse_options


class _Options(TorchEngineOptions, QueuedEngineOptions):
    n_ctx: int = Field(default=2048, ge=16, description="Context window (tokens).")
    flash_attn: bool = Field(default=False, description="Flash attention.")


def _refusal(raw: dict) -> InvalidArgumentError:
    with pytest.raises(InvalidArgumentError) as caught:
        parse_options(_Options, raw, backend="demo")
    assert caught.value.reason == "INVALID_MODEL_OPTION"
    return caught.value


def test_defaults_fill_in_and_values_are_typed():
    options = parse_options(_Options, {"n_ctx": "4096", "threads": 2}, backend="demo")
    assert (options.n_ctx, options.threads, options.niceness, options.max_queue_wait_s) == (
        4096,
        2,
        None,
        0.0,
    )
    assert options.flash_attn is False


def test_unknown_key_names_the_closest_known_option():
    error = _refusal({"n_ctxx": 512})
    assert "unknown option 'n_ctxx' for backend demo (did you mean n_ctx?)" in error.message
    assert "known options:" in error.message and error.metadata["option"] == "n_ctxx"


@pytest.mark.parametrize(
    ("raw", "option", "words"),
    [
        ({"n_ctx": "lots"}, "n_ctx", "valid integer"),
        ({"n_ctx": 1.5}, "n_ctx", "fractional part"),
        ({"n_ctx": 8}, "n_ctx", "greater than or equal to 16"),
        ({"niceness": 20}, "niceness", "less than or equal to 19"),
        ({"threads": 0}, "threads", "greater than or equal to 1"),
        ({"threads": True}, "threads", "true/false is not allowed"),
        ({"max_queue_wait_s": -1}, "max_queue_wait_s", "greater than or equal to 0"),
        ({"max_queue_wait_s": float("nan")}, "max_queue_wait_s", "finite number"),
        ({"flash_attn": "maybe"}, "flash_attn", "valid boolean"),
    ],
)
def test_wrong_types_and_ranges_name_the_option_and_what_is_allowed(raw, option, words):
    error = _refusal(raw)
    assert error.message.startswith(f"option {option}: ") and words in error.message
    assert error.metadata["option"] == option


def test_every_problem_is_listed_and_a_long_value_is_clipped():
    error = _refusal({"n_ctx": "x" * 100_000, "threads": 0, "bogus": 1})
    problems = ("option n_ctx: Input should be a valid integer", "option threads: Input should be", "'bogus'")
    assert all(problem in error.message for problem in problems) and len(error.message) < 2_000


def test_models_are_frozen_and_the_base_forbids_unknown_keys():
    options = parse_options(EngineOptions, {}, backend="demo")
    with pytest.raises(ValidationError):  # frozen instance
        options.niceness = 3  # type: ignore[misc]
    with pytest.raises(InvalidArgumentError):
        parse_options(EngineOptions, {"threads": 1}, backend="demo")


def test_an_engines_type_parameter_is_its_options_model_and_a_torch_lane_needs_threads():
    from engines.base import Engine
    from engines.registry import registered_backends

    class Demo(Engine[_Options]):
        backend = "demo"

    assert Demo.options_model is _Options
    for backend, cls in registered_backends().items():
        assert cls.options_model is not EngineOptions, backend  # every backend is typed
    with pytest.raises(TypeError, match="must have threads"):

        class TorchDemo(Engine[QueuedEngineOptions]):
            runs_torch = True
