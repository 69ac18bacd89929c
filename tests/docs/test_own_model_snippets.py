"""The Python blocks of docs/guide/own_model.rst marked ``.. doctest-run`` run as printed."""

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "guide" / "own_model.rst"


def _blocks() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(r"^\.\. doctest-run\n\n\.\. code-block:: python\n\n((?:(?:   .*)?\n)+)", text, flags=re.M):
        out.append("\n".join(line[3:] for line in m.group(1).split("\n")))
    return out


def test_there_are_runnable_blocks():
    assert len(_blocks()) >= 1


@pytest.mark.parametrize("code", _blocks())
def test_block_runs_and_prints_what_the_docs_say(code, capsys):
    exec(compile(code, str(DOC), "exec"), {"__name__": "own_model_doc"})
    out = capsys.readouterr().out
    assert "[1. 2. 2.] [0.5 2.  3. ]" in out
    assert "condition number" in out and "warnings: []" in out
