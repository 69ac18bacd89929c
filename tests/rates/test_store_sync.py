"""When the result store syncs its file (issue 36): one ``write`` per unit, at most one ``fsync`` per
:attr:`~moestat.rates.store.ResultStore.SYNC_INTERVAL`, and every row synced by :meth:`sort`."""

import numpy as np

from moestat.rates import store as store_mod
from moestat.rates.store import LOSS_NAMES, RESULT_COLUMNS, ResultStore, read_results


def _rows(n: int, reps: range) -> list[dict]:
    out = []
    for r in reps:
        row = {c: 0 for c in RESULT_COLUMNS}
        row.update(scenario="s", router="perturbed", setting="exact", estimator="mle", status="tol", converged=True,
                   n=n, replicate=r, objective=float(np.float64(r) / 7))
        row.update({name: 0.5 for name in LOSS_NAMES})
        out.append(row)
    return out


def test_a_unit_is_one_write_and_fsyncs_are_spaced(tmp_path, monkeypatch):
    syncs, writes = [], []
    monkeypatch.setattr(store_mod, "sync_file", lambda path: syncs.append(path))
    real_append = store_mod.append_line
    monkeypatch.setattr(store_mod, "append_line", lambda path, text, **kw: (writes.append(text), real_append(path, text, **kw)))
    clock = [100.0]
    monkeypatch.setattr(store_mod.time, "monotonic", lambda: clock[0])
    store = ResultStore(tmp_path / "results.csv")
    store.create()
    store.append(_rows(50, range(0, 10)))  # the first unit syncs
    assert len(writes) == 1 and writes[0].count("\n") == 9 and len(syncs) == 1
    clock[0] += 0.2
    store.append(_rows(40, range(0, 10)))  # 0.2 s later: not yet
    store.append([])  # nothing to write: no write, no sync
    assert len(writes) == 2 and len(syncs) == 1
    clock[0] += store.SYNC_INTERVAL
    store.append(_rows(30, range(0, 10)))  # an interval after the last sync
    assert len(syncs) == 2
    clock[0] += 0.1
    store.append(_rows(20, range(0, 10)))
    assert len(syncs) == 2
    store.sort()  # the end of a sweep (rows already in the canonical order, n descending): synced
    assert len(syncs) == 3 and not store._unsynced
    df = read_results(store.path)
    assert len(df) == 40 and sorted(set(df["n"])) == [20, 30, 40, 50]
    assert list(df["objective"][df["n"] == 50]) == [float(np.float64(r) / 7) for r in range(10)]


def test_sort_syncs_an_already_sorted_file(tmp_path, monkeypatch):
    syncs = []
    monkeypatch.setattr(store_mod, "sync_file", lambda path: syncs.append(path))
    monkeypatch.setattr(store_mod.time, "monotonic", lambda: 5.0)
    store = ResultStore(tmp_path / "results.csv")
    store.create()
    store.append(_rows(50, range(0, 3)))
    store.append(_rows(40, range(0, 3)))  # the same instant: appended, not synced
    assert len(syncs) == 1 and store._unsynced
    text = store.path.read_text()
    store.sort()  # already in the canonical order: not rewritten, but synced
    assert store.path.read_text() == text and len(syncs) == 2 and not store._unsynced
