"""Strict validation of user_options (pure)."""

from __future__ import annotations

import pytest

from gpusessions.core.options import InvalidOptions, validate

PROFILES = [
    {"slug": "cpu", "default": True},
    {"slug": "gpu"},
    {
        "slug": "opts",
        "profile_options": {
            "image": {
                "choices": {"a": {}, "b": {}},
                "unlisted_choice": {"enabled": True, "validation_regex": r"[a-z]+:[0-9]+"},
            },
            "size": {"choices": {"s": {}, "m": {}}, "unlisted_choice": {"enabled": False}},
        },
    },
]


def test_valid_options_pass_and_are_normalised() -> None:
    assert validate({}, PROFILES) == {}
    assert validate(None, PROFILES) == {}
    assert validate({"profile": "gpu"}, PROFILES) == {"profile": "gpu"}
    assert validate({"profile": "opts", "image": "a", "size": "m"}, PROFILES) == {
        "profile": "opts",
        "image": "a",
        "size": "m",
    }
    assert validate({"profile": "opts", "image--unlisted-choice": "img:42"}, PROFILES)[
        "image--unlisted-choice"
    ] == ("img:42")
    # Options without a profile refer to the default one.
    with pytest.raises(InvalidOptions, match="Unknown option"):
        validate({"image": "a"}, PROFILES)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"profile": "gpus"}, "Unknown profile 'gpus'. Available to you: cpu, gpu, opts."),
        ({"profile": None}, "must be a string"),
        ({"profile": True}, "must be a string, not bool"),
        ({"profile": {"$ne": 1}}, "must be a string, not dict"),
        ({"profile": "gpu", "extra": "1"}, "Unknown option(s) for profile 'gpu': extra"),
        ({"profile": "opts", "image--unlisted-choice": "img:42 junk"}, "is not a valid image"),
        ({"profile": "opts", "image--unlisted-choice": "img:42\nX"}, "control characters"),
        ({"profile": "opts", "size--unlisted-choice": "xl"}, "does not accept other values"),
        ({"profile": "opts", "size": "xl"}, "'xl' is not a choice for 'size'. Choices: s, m."),
        ({"profile": "opts", "size": "s", "size--unlisted-choice": "s"}, "not both"),
        ({"profile": "opts", "image--unlisted-choice": "a" * 257}, "longer than 256"),
        ({1: "x"}, "Option names must be strings"),
    ],
)
def test_bad_options_are_refused_with_a_reason(options: dict, message: str) -> None:
    with pytest.raises(InvalidOptions) as err:
        validate(options, PROFILES)
    assert message in str(err.value)


def test_options_without_profiles_are_refused() -> None:
    with pytest.raises(InvalidOptions, match="offers no options"):
        validate({"profile": "x"}, [])
    with pytest.raises(InvalidOptions, match="must be an object"):
        validate("gpu", PROFILES)


def test_messages_do_not_echo_huge_or_control_input() -> None:
    with pytest.raises(InvalidOptions) as err:
        validate({"profile": "x" * 100 + "\x1b[31m"}, PROFILES)
    assert "\x1b" not in str(err.value) and len(str(err.value)) < 300
