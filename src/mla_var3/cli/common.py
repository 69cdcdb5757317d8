"""Small pieces the CLI front ends share."""
from __future__ import annotations

import json
from pathlib import Path


def write_json(path: str | None, recs: list[dict]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(recs, indent=1, default=str))
