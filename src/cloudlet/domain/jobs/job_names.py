"""Generated job names, shaped like Azure ML's (``<adjective>_<noun>_<8 hex>``): the client's and
the studio's when a job document names none."""

from __future__ import annotations

import secrets

# fmt: off
_ADJECTIVES = (
    "affable", "amiable", "bold", "brave", "busy", "calm", "clever", "cool", "crisp", "eager",
    "frosty", "gentle", "happy", "honest", "jolly", "keen", "kind", "lively", "lucid", "mellow",
    "modest", "nifty", "polite", "quiet", "shy", "sleepy", "stoic", "sunny", "tidy", "witty",
)
_NOUNS = (
    "apple", "basket", "boot", "camel", "carrot", "cup", "engine", "feather", "garden", "guitar",
    "island", "kettle", "lemon", "lion", "market", "night", "onion", "owl", "pencil", "pin", "plum",
    "river", "rocket", "sail", "spoon", "stick", "tomato", "tray", "whale", "yak",
)
# fmt: on


def generate_job_name() -> str:
    """An Azure-like job name: ``<adjective>_<noun>_<8 hex>``, e.g. ``frosty_kettle_3b9f0c1d``."""
    return f"{secrets.choice(_ADJECTIVES)}_{secrets.choice(_NOUNS)}_{secrets.token_hex(4)}"
