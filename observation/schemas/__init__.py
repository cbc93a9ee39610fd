"""JSON Schema documents shipped with hitlflow: the log event and the snapshot."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def load(name: str) -> dict[str, Any]:
    """``load("event")`` or ``load("snapshot")``: the parsed ``<name>.schema.json``."""
    return json.loads(resources.files(__name__).joinpath(f"{name}.schema.json").read_text())
