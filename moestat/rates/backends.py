"""Execution of work units: in-process, joblib ``loky`` workers, or a ``dask.distributed`` cluster.

The backends only decide *where* a unit runs.  A unit carries everything it needs and its result
depends on nothing else (see :mod:`moestat.rates.sweep`), so the rows are bit-identical
whatever the backend, ``n_jobs`` or the order in which units finish.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

__all__ = ["execute"]

U = TypeVar("U")


def execute(
    work: Callable[[U], list[dict]],
    units: Sequence[U],
    on_result: Callable[[U, list[dict]], None],
    *,
    n_jobs: int = 1,
    backend: str = "loky",
    scheduler: str | None = None,
    progress: bool | None = None,
    total_fits: int | None = None,
) -> None:
    """Run ``work(unit)`` for every unit and hand its rows to ``on_result`` as soon as it finishes.

    Parameters
    ----------
    work : callable
        ``work(unit) -> list of row dicts``; a module-level function (workers unpickle it by
        name), e.g. :func:`moestat.rates.sweep.run_unit`.
    units : sequence
        Picklable work units (e.g. :class:`moestat.rates.sweep.WorkUnit`).
    on_result : callable
        Called in the calling process, one unit at a time (so one writer appends to the store).
    n_jobs : int
        joblib workers (``backend="loky"``); 1 runs in-process.
    backend : {"loky", "dask"}
        ``dask``: submit to the ``dask.distributed`` scheduler at ``scheduler``.
    progress : bool or None
        tqdm progress bar; ``None`` shows it only on a terminal, ``False`` never.
    total_fits : int, optional
        Total of the progress bar (rows expected); default the replicates of every unit.
    """
    from tqdm.auto import tqdm

    units = list(units)
    total = total_fits if total_fits is not None else sum(len(u.replicates) for u in units)
    bar = tqdm(total=total, unit="fit", disable=None if progress is None or progress else True, leave=False)
    try:
        if backend == "dask":
            from distributed import Client, as_completed

            with Client(scheduler) as client:  # the default client while open: as_completed needs it
                futures = client.map(work, units, pure=False)
                by_future = dict(zip(futures, units))
                for fut in as_completed(futures):
                    rows = fut.result()
                    on_result(by_future[fut], rows)
                    bar.update(len(rows))
        elif n_jobs == 1 or len(units) <= 1:
            for u in units:
                rows = work(u)
                on_result(u, rows)
                bar.update(len(rows))
        else:
            from joblib import Parallel, delayed

            par = Parallel(n_jobs=n_jobs, backend="loky", return_as="generator_unordered")
            # Unordered results carry their unit, so completion order is irrelevant.
            for u, rows in par(delayed(_run_tagged)(work, u) for u in units):
                on_result(u, rows)
                bar.update(len(rows))
    finally:
        bar.close()


def _run_tagged(work: Callable[[U], list[dict]], unit: U) -> tuple[U, list[dict]]:
    return unit, work(unit)
