"""studies/figure1/figure1.py redraws from its recorded figure1.json (records/figure1)."""

import pytest
from script_loader import load_script


def test_figure1_script_redraws_from_its_recorded_json(tmp_path):
    """studies/figure1/figure1.py --figure-only draws both panels from the recorded figure1.json,
    and refuses a folder without one (exit 2, nothing written)."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    mod = load_script("studies/figure1/figure1.py")
    shutil.copyfile(root / "records" / "figure1" / "figure1.json", tmp_path / "figure1.json")
    assert mod.main(["--out", str(tmp_path), "--figure-only"]) == 0
    from PIL import Image

    assert Image.open(tmp_path / "figure1.png").size[0] >= 1800
    empty = tmp_path / "empty"
    with pytest.raises(SystemExit) as e:
        mod.main(["--out", str(empty), "--figure-only"])
    assert e.value.code == 2 and not empty.exists()
