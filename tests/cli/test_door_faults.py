"""Faults a new user meets at the doors: sizes beyond the machine, edited stores, a bare
``moestat``, a closed stdout, interrupts.  Each is one line on stderr with its exit status;
bad input writes nothing."""

from __future__ import annotations

import pytest

from tests.cli.test_doors import DOORS, _run

HUGE = "1000000000000"  # 10**12: no machine holds that many samples


@pytest.mark.parametrize("argv,flag", [
    (["check", "--draws", HUGE], "--draws"),
    (DOORS["softmoe norm-target"] + ["--eval-size", HUGE], "--eval-size"),
    (DOORS["tagging"] + ["--demo-train", HUGE], "--demo-train"),
    (DOORS["tagging"] + ["--demo-val", HUGE], "--demo-val"),
], ids=["check --draws", "softmoe --eval-size", "tagging --demo-train", "tagging --demo-val"])
def test_a_size_beyond_the_machine_is_bad_input_not_an_internal_error(argv, flag, tmp_path, capsys):
    out = tmp_path / "out"
    extra = [] if argv[0] == "check" else ["--out", str(out)]
    rc, err = _run(argv + extra, capsys)
    assert rc == 2 and err.count("\n") == 1 and flag in err and "internal error" not in err, err
    assert not out.exists()
