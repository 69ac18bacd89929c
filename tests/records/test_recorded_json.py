"""Every recorded JSON under records/ is standard JSON (RFC 8259: no NaN or Infinity), the rule of studies/tools/recorded_refit.py."""

from __future__ import annotations

import json
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _strict(text: str):
    """RFC 8259 JSON: Python's parser, with its NaN / Infinity / -Infinity extension refused."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not standard JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "records").rglob("*.json")))
def test_every_recorded_json_is_standard_json(path):
    # a strict parser (JavaScript's JSON.parse, jq, serde_json) rejects NaN and Infinity, which Python writes by default
    _strict((ROOT / path).read_text())
