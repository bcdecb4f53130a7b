"""How a cloudlet process starts (the CLI, ``cloudlet server``, a server's worker): its modules are
imported with Python's cyclic garbage collector paused.

Importing the server makes ~280,000 objects that live as long as the process (modules, classes,
pydantic's and SQLAlchemy's schemas, FastAPI's routes); with the collector running, each
generation-2 pass during the import walked all of them made so far, again and again: ~0.8 s of
the ~2 s ``import cloudlet.server`` took, ~0.1 s of the CLI's ~0.5 s (docs/performance.md,
"Start-up"). Paused, the import makes a few thousand objects of garbage (cycles left by
decorators and class creation), which are frozen with the rest rather than paid for by a full
collection: ``gc.freeze`` puts what exists into the permanent generation, which later passes
skip (the interpreter's last collection at exit too: ~0.5 s of an exit after importing the server),
as ``server.settle_heap`` does again once the server is built.

Standard library only, and nothing else imported: the CLI and the server start here. ``cli``
is the ``cloudlet`` command and ``python -m cloudlet``; ``python -m cloudlet.startup MODULE``
runs MODULE's ``main()``: ``cloudlet.server_command`` (what the CLI's ``server`` execs) and
``cloudlet.serving`` (a server's worker).
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import sys
from types import ModuleType


def load(module: str) -> ModuleType:
    """Import MODULE (and all it imports) with the collector paused; then freeze what exists and
    let the collector run again as it did."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(module)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def cli() -> None:
    """The ``cloudlet`` command (``[project.scripts]``, ``python -m cloudlet``). ``cloudlet server
    OPTIONS`` goes straight to the server's own parser (``server_command``): the CLI's ``server``
    would load every command only to pass the options on to it (``cli/main.py``: ``server_cmd``),
    ~0.35 s of every server's start. Its help, and a client-only install (no FastAPI), are the
    CLI's to answer."""
    args = sys.argv[1:]
    if args[:1] == ["server"] and not {"-h", "--help"} & set(args) and importlib.util.find_spec("fastapi"):
        load("cloudlet.server_command").main(args[1:])
        return
    load("cloudlet.cli.main").app()


def main() -> None:
    """``python -m cloudlet.startup MODULE [ARGS...]``: MODULE's ``main()``, loaded as above, with
    ARGS as its command line (MODULE stays a word of the process's command line: a server's
    workers are found by ``cloudlet.serving`` in theirs)."""
    module = sys.argv.pop(1)
    load(module).main()


if __name__ == "__main__":
    main()
