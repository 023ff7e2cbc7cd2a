"""The errors that are the user's to fix, and a did-you-mean helper for their messages.

Every error a user can cause with a recipe, a command-line option, a data file or a saved
model derives from `UserError` (besides its conventional base: ValueError, KeyError,
RuntimeError, FileNotFoundError), so `titans-seq` prints such an error as one line and a
bug in the code still shows its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """A problem with the input (recipe, option, data, file) that the user can fix."""


class UnknownNameError(UserError, KeyError):
    """A name (dataset, task, split...) that is not registered; a KeyError for callers."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest of `choices` to `name`, or '' when none is."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
