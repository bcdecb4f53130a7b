"""Command lines as ``az`` reads them: global options anywhere, and long options by any unambiguous
prefix (``az`` parses with argparse, which allows abbreviations, so Azure's own scripts write
``--endpoint`` for ``--endpoint-name`` and ``--out`` for ``--output``).

Pure functions over the argument list and the option names of the command being called.
"""

from __future__ import annotations

from collections.abc import Iterable

# Global options that take a value, and the flags az takes everywhere (accepted, no effect here).
GLOBAL_VALUE_OPTIONS = frozenset(
    {"-o", "--output", "-w", "--workspace", "--workspace-name", "-g", "--resource-group", "--subscription"}
    | {"--query"}
)
GLOBAL_FLAGS = frozenset({"--debug", "--verbose", "--only-show-errors"})
_SHORT_WITH_VALUE = ("-o", "-w", "-g")


def expand_prefixes(args: list[str], long_options: Iterable[str]) -> list[str]:
    """Each ``--abbrev`` (or ``--abbrev=value``) that starts exactly one of ``long_options`` becomes
    it; exact names, ambiguous and unknown prefixes stay as written (the parser then names them)."""
    names = sorted(set(long_options))
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        head, sep, value = arg.partition("=")
        if not head.startswith("--") or head in names:
            out.append(arg)
            continue
        matches = [name for name in names if name.startswith(head)]
        out.append(matches[0] + sep + value if len(matches) == 1 else arg)
    return out


def hoist_global_options(args: list[str]) -> list[str]:
    """Move global options (and their values) found anywhere before ``--`` to the front."""
    hoisted: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        head = arg.split("=", 1)[0]
        if arg in GLOBAL_VALUE_OPTIONS and i + 1 < len(args):
            hoisted.extend(args[i : i + 2])
            i += 2
            continue
        joined_long = arg.startswith("--") and "=" in arg and head in GLOBAL_VALUE_OPTIONS
        joined_short = len(arg) > 2 and arg[:2] in _SHORT_WITH_VALUE and not arg.startswith("--")
        if joined_long or joined_short or arg in GLOBAL_FLAGS:
            hoisted.append(arg)
        else:
            rest.append(arg)
        i += 1
    return hoisted + rest
