"""The errors that are the user's to fix, and a did-you-mean helper for their messages.

Every error a user can cause with a recipe, a command-line option, a data file or a saved
model derives from `UserError` (besides its conventional base: ValueError, KeyError,
RuntimeError, FileNotFoundError), so `titans-seq` prints such an error as one line and a
bug in the code still shows its traceback.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


class UserError(Exception):
    """A problem with the input (recipe, option, data, file) that the user can fix."""


class UnknownNameError(UserError, KeyError):
    """A name (dataset, task, split...) that is not registered; a KeyError for callers."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice closest to `name` (a likely typo of it), or None when none is close."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest of `choices` to `name`, or '' when none is."""
    match = closest(name, choices)
    return f" (did you mean {match!r}?)" if match else ""


def hide_password(url: str) -> str:
    """`url` with the password of any `scheme://user:password@` replaced by ***, for
    messages (also inside a longer text that quotes the URL)."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", url)


class ConfigError(UserError, ValueError):
    """A recipe, override or option is invalid; the message names the offending key."""


class DataError(UserError, ValueError):
    """The data itself is unusable (missing values, bad timestamps, too short, wrong types)."""
