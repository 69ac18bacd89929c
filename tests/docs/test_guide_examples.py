"""The Python blocks of the guide marked ``.. example-run`` (issue 35: the facts a user had to guess:
the layout of ``eta``, ``[fit] k_active``, exponent lists, the built-in D2 in a likelihood file,
what a mixture file needs, how DSC picks ``k``; issue 58: the performance page's thread and memory
rules, and the catalogue page's growing of a record, the rates page's replay of a recorded fit) run as printed; each block asserts its own claims."""

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide"
PAGES = ("own_model.rst", "own_gmoe.rst", "selection.rst", "performance.rst", "catalogue.rst", "rates.rst")


def _blocks(page: str) -> list[str]:
    text = (GUIDE / page).read_text(encoding="utf-8")
    pattern = r"^\.\. example-run\n\n\.\. code-block:: python\n\n((?:(?:   .*)?\n)+)"
    return ["\n".join(line[3:] for line in m.group(1).split("\n")) for m in re.finditer(pattern, text, flags=re.M)]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_has_runnable_examples(page):
    assert _blocks(page), page


@pytest.mark.slow
@pytest.mark.parametrize("page,code", [(p, c) for p in PAGES for c in _blocks(p)])
def test_example_runs_and_its_assertions_hold(page, code, capsys):
    exec(compile(code, str(GUIDE / page), "exec"), {"__name__": "guide_example"})
    out = capsys.readouterr().out
    text = (GUIDE / page).read_text(encoding="utf-8")
    # what the block prints first is quoted in the page ("It prints ``...``")
    first = out.splitlines()[0].strip()
    assert first and f"``{first}" in text, (page, first)
