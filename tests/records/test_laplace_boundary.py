"""``records/catalogue/laplace-gmoe/boundary.py``: which fits touch the compact gate set, and its
command line (bad input: one line, exit 2, nothing written)."""

from pathlib import Path

import numpy as np

from moestat.model.mixing import ParameterBox

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "records" / "catalogue" / "laplace-gmoe" / "boundary.py"


def _module():
    return load_script(SCRIPT)


def test_box_contact_flags_a_coordinate_on_either_bound():
    box = ParameterBox(beta0=10.0, beta1=2.0)
    beta1 = np.array([[[0.5, -0.5], [1.9, 0.0], [0.0, 0.0]],       # inside
                      [[0.5, -0.5], [-2.0, 0.3], [0.0, 0.0]],      # a centre coordinate on -2
                      [[0.5, -0.5], [1.0, 0.3], [0.0, 0.0]]])      # inside, but beta0 on +10
    beta0 = np.array([[0.4, -3.0, 0.0], [0.4, 1.0, 0.0], [10.0, 1.0, 0.0]])
    b1, b0, on = _module().box_contact(beta0, beta1, box)
    np.testing.assert_array_equal(b1, [1.9, 2.0, 1.0])
    np.testing.assert_array_equal(b0, [3.0, 1.0, 10.0])
    np.testing.assert_array_equal(on, [False, True, True])


def test_bad_command_line_is_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "b.csv"
    assert _module().main([str(tmp_path), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a recorded run" in err[0] and not out.exists()
    assert _module().main([str(tmp_path)]) == 2
