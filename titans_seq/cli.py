"""`titans-seq`: the command-line entry point.

Each subcommand lives in its own module, which exposes `register(subparsers)`: it adds its
parser and sets `handler` (a function `args -> exit code`). The modules are found through
the `titans_seq.commands` entry-point group (pyproject.toml), so a domain, or any installed
package, adds a command by declaring one entry. Modules import their heavy dependencies
inside the handlers, so `titans-seq --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from importlib import metadata
from pathlib import Path

COMMANDS_GROUP = "titans_seq.commands"

# errors that are the user's to fix: one clear line instead of a traceback. UserError is
# raised for bad recipes, options, data and files; ValueError is Python's "bad value" (the
# mixers' option checks raise it); an OSError (a full disk, a read-only or missing folder,
# an unreachable server) names the path or address. A KeyError or TypeError is a bug until
# shown otherwise: it keeps its traceback.
USER_ERRORS = (ValueError, OSError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="titans-seq",
        description="Titans neural long-term memory as sequence mixers: train, tune, evaluate.",
    )
    from titans_seq import __version__

    parser.add_argument("--version", action="version", version=f"titans-seq {__version__}")
    parser.add_argument(
        "--traceback", action="store_true", help="show the full traceback of an error"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    points = sorted(metadata.entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name)
    if not points:
        raise SystemExit(
            "titans-seq: no commands are registered: the package metadata is missing; "
            "install titans-seq (pip install -e .) instead of running it from a source tree"
        )
    for point in points:
        point.load()(subparsers)
    for command in subparsers.choices.values():
        # every option's help shows its default; descriptions keep their line breaks
        command.formatter_class = HelpFormatter
    return parser


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help with each option's default (unless the help states it, or there is none to show:
    None, a flag), and descriptions as written."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if "(default" in text or "%(default)" in text:
            return text
        if default is None or default is False or default is argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)"


def is_override(arg) -> bool:
    """`key=value` with a dotted key (`train.max_steps=60`), as the recipe commands take."""
    key, sep, _ = str(arg).partition("=")
    return bool(sep) and not key.startswith("-") and "." in key and " " not in key


def collect_overrides(args: argparse.Namespace, unknown: list[str]) -> None:
    """Overrides anywhere on the line: argparse reads the positional `key=value` list only
    up to the first option, so those after an option come back unknown, and an option with
    an optional value (`--resume`) would take one as its value. They are moved to
    `args.overrides`, in command-line order (`unknown` keeps what is still unknown)."""
    if not isinstance(getattr(args, "overrides", None), list):
        return
    resume = getattr(args, "resume", None)
    if isinstance(resume, str) and is_override(resume) and not Path(resume).exists():
        args.overrides.append(resume)
        args.resume = True
    args.overrides.extend(arg for arg in unknown if is_override(arg))
    unknown[:] = [arg for arg in unknown if not is_override(arg)]


def one_line_warnings(command: str):
    """A `warnings.formatwarning` that writes `titans-seq CMD: warning: ...`: the file and
    source line Python adds say nothing to a user of the command (--traceback keeps them).
    Formatting, not showing, is replaced, so warnings recorded by a caller stay recorded."""

    def format_warning(message, category, filename, lineno, line=None):
        kind = "" if category is UserWarning else f" ({category.__name__})"
        return f"titans-seq {command}: warning{kind}: {message}\n"

    return format_warning


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    # a command that wraps another tool's command line takes the arguments it does not know
    if getattr(args, "forward_unknown_args", False):
        args.forwarded_args = unknown
    else:
        collect_overrides(args, unknown)
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        with warnings.catch_warnings():
            if not args.traceback:
                warnings.formatwarning = one_line_warnings(args.command)
            return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print(f"titans-seq {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        from titans_seq.errors import UserError

        if args.traceback or not isinstance(err, (UserError, *USER_ERRORS)):
            raise
        print(f"titans-seq {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
