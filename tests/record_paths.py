"""Where a path written inside a record now lives (issue 58 moved simulations/ to records/ and studies/).

Records are never rewritten, so a JSON recorded before the move names other records by their former
path (``simulations/...``).  :func:`resolve` maps such a path through ``records/index.toml``'s
``former_path`` fields (the longest matching one wins); a path that was not moved is returned as is.
"""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def _former() -> dict[str, str]:
    index = tomllib.loads((ROOT / "records" / "index.toml").read_text(encoding="utf-8"))
    out = {}
    for r in index["record"]:
        news = [r["path"], *r.get("files", [])]
        for old, new in zip(r["former_path"], news):
            out[old] = new
    return out


def resolve(recorded: str | Path) -> Path:
    """The absolute path now holding what a record calls ``recorded`` (relative to the repository root)."""
    rec = Path(recorded).as_posix()
    former = _former()
    best = max((o for o in former if rec == o or rec.startswith(o + "/")), key=len, default=None)
    return ROOT / (former[best] + rec[len(best):] if best else rec)
