"""Numbers read from the environment by the loops each pass (``CLOUDLET_*`` settings).

A setting read inside a scheduling round or a loop pass must not stop it with a typo: a value that
is not a finite number at least ``minimum`` is logged (once per distinct value) and the default
used instead."""

from __future__ import annotations

import logging
import math
import os

log = logging.getLogger("cloudlet.settings")
_warned: set[tuple[str, str]] = set()


def env_number(name: str, default: float, minimum: float = 0.0) -> float:
    """``float($NAME)`` when it is a finite number >= MINIMUM; DEFAULT when unset, empty or not."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and value >= minimum:
        return value
    if (name, raw) not in _warned:
        _warned.add((name, raw))
        log.warning("%s=%r is not a number >= %g; using the default %g", name, raw, minimum, default)
    return default
