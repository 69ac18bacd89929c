"""The records' tier: every test under tests/records/ reads recorded runs under records/.

Each test collected here is marked ``records`` and ``slow`` (``pytest -m "not records"`` leaves the
tier out; ``pytest tests/records`` or ``-m records`` runs it alone).
"""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.records)
            item.add_marker(pytest.mark.slow)
