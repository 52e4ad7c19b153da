"""Strict server-side validation of user_options against the profile list.

Every submitted option is checked before anything is created: the profile must
be one this user is offered, every key must belong to it, values must be
strings of sane length, a choice must be listed, and an unlisted choice must be
enabled and match its validation regex in full (KubeSpawner uses an unanchored
`re.match`). Problems raise `InvalidOptions` with a message for the user.
"""

from __future__ import annotations

import re
from typing import Any

MAX_VALUE_LENGTH = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class InvalidOptions(ValueError):
    pass


def _check_value(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidOptions(f"Option '{_show(key)}' must be a string, not {type(value).__name__}.")
    if len(value) > MAX_VALUE_LENGTH:
        raise InvalidOptions(f"Option '{_show(key)}' is longer than {MAX_VALUE_LENGTH} characters.")
    if _CONTROL.search(value):
        raise InvalidOptions(f"Option '{_show(key)}' contains control characters.")
    return value


def _show(s: str) -> str:
    """A safe, short rendering of untrusted text for messages."""
    s = _CONTROL.sub("?", str(s))
    return s if len(s) <= 60 else s[:57] + "..."


def validate(user_options: Any, profile_list: list[dict[str, Any]]) -> dict[str, str]:
    """Return the validated options (all strings), or raise InvalidOptions."""
    if user_options is None:
        return {}
    if not isinstance(user_options, dict):
        raise InvalidOptions("user_options must be an object.")
    if not user_options:
        return {}
    for key in user_options:
        if not isinstance(key, str):
            raise InvalidOptions("Option names must be strings.")
    if not profile_list:
        raise InvalidOptions(f"This hub offers no options; got {', '.join(_show(k) for k in user_options)}.")
    slugs = [p["slug"] for p in profile_list]
    if "profile" not in user_options:
        profile = next((p for p in profile_list if p.get("default")), profile_list[0])
    else:
        slug = _check_value("profile", user_options["profile"])
        matches = [p for p in profile_list if p["slug"] == slug]
        if not matches:
            raise InvalidOptions(f"Unknown profile '{_show(slug)}'. Available to you: {', '.join(slugs)}.")
        profile = matches[0]
    options: dict[str, Any] = profile.get("profile_options") or {}
    allowed = {"profile"}
    for name in options:
        allowed |= {name, f"{name}--unlisted-choice"}
    unknown = sorted(set(user_options) - allowed)
    if unknown:
        raise InvalidOptions(
            f"Unknown option(s) for profile '{profile['slug']}': {', '.join(_show(k) for k in unknown)}."
        )
    out = {"profile": profile["slug"]}
    for name, option in options.items():
        unlisted_key = f"{name}--unlisted-choice"
        choice = user_options.get(name)
        unlisted = user_options.get(unlisted_key)
        if name in user_options and choice is None:
            raise InvalidOptions(f"Option '{_show(name)}' must be a string, not null.")
        if unlisted_key in user_options and unlisted is None:
            raise InvalidOptions(f"Option '{_show(unlisted_key)}' must be a string, not null.")
        if choice is not None and unlisted is not None:
            raise InvalidOptions(f"Give either a choice or an other value for '{name}', not both.")
        if unlisted is not None:
            unlisted = _check_value(unlisted_key, unlisted)
            cfg = option.get("unlisted_choice") or {}
            if not cfg.get("enabled"):
                raise InvalidOptions(f"'{name}' does not accept other values.")
            regex = cfg.get("validation_regex")
            if regex and not re.fullmatch(regex, unlisted):
                hint = cfg.get("validation_message") or f"it must match {regex}"
                raise InvalidOptions(f"'{_show(unlisted)}' is not a valid {name}: {hint}.")
            out[unlisted_key] = unlisted
        elif choice is not None:
            choice = _check_value(name, choice)
            choices = option.get("choices") or {}
            if choice not in choices:
                raise InvalidOptions(
                    f"'{_show(choice)}' is not a choice for '{name}'. Choices: {', '.join(choices)}."
                )
            out[name] = choice
    return out
