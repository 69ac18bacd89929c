"""Faults of the environment told apart from bugs (:mod:`moestat.faults`): the exception chain."""

from __future__ import annotations

import errno

from moestat.faults import ClusterFault, DiskFull, as_environment_fault


def _raised(make):
    try:
        make()
    except BaseException as exc:  # noqa: BLE001
        return exc
    raise AssertionError("nothing raised")


def _enospc():
    raise OSError(errno.ENOSPC, "No space left on device", "/tmp/fig.pdf")


def test_a_full_disk_under_a_library_error_is_a_full_disk():
    # matplotlib's PDF writer on a full disk: AttributeError raised while handling the OSError
    def savefig():
        try:
            _enospc()
        except OSError:
            raise AttributeError("'Stream' object has no attribute 'pos'")

    fault = as_environment_fault(_raised(savefig))
    assert isinstance(fault, DiskFull) and "disk full writing /tmp/fig.pdf" in str(fault)


def test_a_cause_two_links_down_is_found_and_an_explicit_cause_wins():
    def nested():
        try:
            try:
                _enospc()
            except OSError as exc:
                raise RuntimeError("flush failed") from exc
        except RuntimeError:
            raise KeyError("pos")

    assert isinstance(as_environment_fault(_raised(nested)), DiskFull)


def test_a_context_hidden_with_from_none_and_a_plain_bug_are_not_faults():
    def hidden():
        try:
            _enospc()
        except OSError:
            raise AttributeError("a bug, said to be unrelated") from None

    assert as_environment_fault(_raised(hidden)) is None
    assert as_environment_fault(AttributeError("'Stream' object has no attribute 'pos'")) is None


def test_a_cyclic_chain_ends():
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert as_environment_fault(a) is None


def test_futures_cancelled_because_the_scheduler_was_lost_is_the_cluster():
    class FuturesCancelledError(Exception):
        pass

    FuturesCancelledError.__module__ = "distributed.client"
    exc = FuturesCancelledError("29 Futures cancelled:\nReasons:\n29 Futures cancelled for reason: scheduler-connection-lost.")
    fault = as_environment_fault(exc)
    assert isinstance(fault, ClusterFault) and "lost the connection to the dask scheduler" in str(fault)
    assert "\n" not in str(fault)
