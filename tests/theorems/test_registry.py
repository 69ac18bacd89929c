"""The theorem registry: one data file per entry, loaded to the content the catalogue had as Python.

``registry_snapshot.json`` is the registry's content as the Python catalogue declared it before the
data files (every entry's fields, runs and their full and quick configurations, predictions, the
theorems with their model classes evaluated on a grid of models, the run -> theorem map and the
headline predictions of a scenario file's rows); the loaded files must give it back.  Regenerate it
only for a deliberate change of an entry: ``python tests/theorems/test_registry.py > tests/theorems/registry_snapshot.json``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from types import SimpleNamespace

import pytest

from moestat.rates.catalogue_config import run_config
from moestat.theorems import registry as R

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).with_name("registry_snapshot.json")
#: the model attributes a theorem's class is read from, each over values on both sides of every class
GRID = {"score_kind": ["perturbed", "cosine", "linear"],
        "normalisation": ["softmax", "sigmoid", "shared-sigmoid", "normalised-sigmoid", "laplace", "gaussian"],
        "likelihood": [None, "gaussian", "multinomial"], "k_active": [None, 2], "setting": ["exact", "over"],
        "expert_kind": ["identity", "poly", "gelu"]}


def _plain(x):
    """A JSON-able copy: dataclasses and mappings to dicts, tuples to lists, the checkout's root to ``ROOT``."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if hasattr(x, "items"):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, str):
        return x.replace(str(ROOT) + "/", "ROOT/")
    return x


def registry_content() -> dict:
    """Everything the registry declares, as plain data."""
    out = {"entries": {}, "theorems": {}}
    for key, e in R.ENTRIES.items():
        out["entries"][key] = {"entry": _plain(e), "texts": [p.text for p in e.predictions],
                               "configs": {r.label: {"full": _plain(run_config(r, False)), "quick": _plain(run_config(r, True))}
                                           for r in e.runs}}
    models = [SimpleNamespace(**dict(zip(GRID, v))) for v in itertools.product(*GRID.values())]
    for t in R.THEOREMS:
        out["theorems"][t.key] = {**{f: _plain(getattr(t, f)) for f in ("cite", "claim", "requires", "read", "setting")},
                                  "applies": "".join("1" if t.applies(m) else "0" for m in models)}
    out["theorem_order"] = [t.key for t in R.THEOREMS]
    out["catalogue_theorems"] = [[list(k), v] for k, v in R.CATALOGUE_THEOREMS.items()]
    out["headlines"] = {f"{t.key}/{s}": _plain(R.headline_prediction(t.key, s)) for t in R.THEOREMS for s in ("exact", "over")
                        if t.headline.get(s)}
    return out


def test_the_data_files_load_to_the_catalogue_declared_before_them():
    want = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    got = json.loads(json.dumps(registry_content()))
    assert list(got["entries"]) == list(want["entries"])
    for key in want["entries"]:
        assert got["entries"][key] == want["entries"][key], key
    assert got == want


def test_the_wheel_ships_every_data_file():
    files = R.data_files()
    assert [p.name for p in files][:2] == ["01-cosine-exact.toml", "02-cosine-over.toml"]
    assert len(files) == len(R.ENTRIES) + 1  # and the classical theorem's
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["moestat.theorems"]
    assert all(any(fnmatch(f"data/{p.name}", pat) for pat in patterns) for p in files)


def test_a_new_entry_is_one_data_file(tmp_path):
    new = tmp_path / "15-gmoe-exact-small.toml"
    new.write_text('key = "gmoe-exact-small"\ntheorem = "Theorem 1"\nfigure = "none"\nmodel = "model 1"\n'
                   'estimator = "mle"\npaper_design = "moestat\'s"\npaper = "2305.03288"\n\n'
                   '[[runs]]\nlabel = "gaussian-moe"\ntheorem = "gmoe-softmax"\n'
                   'base = {family = "gaussian-moe", estimator = "mle", setting = "exact"}\n'
                   'full = {n_min = 1000, n_max = 8000, n_points = 4, reps = 10}\n'
                   'quick = {n_min = 500, n_max = 2000, n_points = 3, reps = 4}\n\n'
                   '[[predictions]]\nrun = "gaussian-moe"\nloss = "voronoi"\nexponent = -0.5\nsource = "Theorem 1 (D1)"\n'
                   'standing = "abstract"\n')
    entries, theorems, runs = R.load(R.data_files() + [new])
    e = entries["gmoe-exact-small"]
    assert list(entries)[-1] == e.key and e.paper == R.ENTRIES["gmoe-exact"].paper
    assert runs[("gmoe-exact-small", "gaussian-moe", None)] == "gmoe-softmax"
    assert run_config(e.runs[0], True).ns[-1] == 2000
    assert len(theorems) == len(R.THEOREMS)


@pytest.mark.parametrize("text, message", [
    ('key = "x"\nfigures = "typo"\n', "unknown keys figures"),
    ('key = "x"\ntheorem = "t"\nfigure = "f"\nmodel = "m"\nestimator = "e"\npaper_design = "d"\npaper = "0000.00000"\n'
     '[[runs]]\nlabel = "a"\nbase = {}\nfull = {}\nquick = {}\n', "paper 0000.00000 is not declared"),
    ('key = "x"\ntheorem = "t"\nfigure = "f"\nmodel = "m"\nestimator = "e"\npaper_design = "d"\npaper = "2305.03288"\n'
     '[[runs]]\nlabel = "a"\ntheorem = "no-such"\nbase = {}\nfull = {}\nquick = {}\n', "theorem no-such is declared by no"),
    ('[[theorems]]\nkey = "gmoe-softmax"\ncite = "c"\nclaim = "c"\nread = "r"\nmodel_class = {}\nrequires = {}\n',
     "theorem gmoe-softmax is declared twice"),
    ('[[theorems]]\nkey = "t2"\ncite = "c"\nclaim = "c"\nread = "r"\nmodel_class = {gate = "softmax"}\nrequires = {}\n',
     "model_class keys gate unknown"),
])
def test_a_bad_data_file_is_a_one_line_error_naming_it(tmp_path, text, message):
    bad = tmp_path / "50-bad.toml"
    bad.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        R.load(R.data_files() + [bad])
    assert "\n" not in str(info.value)


def test_a_theorems_model_class_reads_equal_one_of_absent_and_present():
    t = R.Theorem("t", "c", "c", {"score_kind": "linear", "normalisation": ["sigmoid", "softmax"], "likelihood": False,
                                  "k_active": True}, {}, "r")
    model = SimpleNamespace(score_kind="linear", normalisation="softmax", likelihood=None, k_active=2)
    assert t.applies(model)
    for change in ({"score_kind": "cosine"}, {"normalisation": "laplace"}, {"likelihood": "gaussian"}, {"k_active": None}):
        assert not t.applies(SimpleNamespace(**{**vars(model), **change})), change


def test_no_module_but_the_registry_declares_an_entry_or_a_theorem():
    for path in (ROOT / "moestat").rglob("*.py"):
        src = path.read_text(encoding="utf-8")
        if path.name == "registry.py" or "moestat.theorems.registry" not in src:
            continue  # only the registry's types count (moestat.nn.predict has a Prediction of its own)
        calls = re.findall(r"(?<![\w.])(?:Entry|Theorem|Prediction|Paper)\(", src)
        assert not calls, (path, calls)


if __name__ == "__main__":
    print(json.dumps(registry_content(), indent=1))
