"""Fixtures shared by the rate-pipeline tests."""

import pytest


@pytest.fixture
def no_figures(monkeypatch):
    """The sweep's figures off: they are not under test in a tiny end-to-end run and cost most of its time
    (use with ``pytestmark = pytest.mark.usefixtures("no_figures")``)."""
    import moestat.rates.figures as figures

    monkeypatch.setattr(figures, "plot_convergence", lambda *a, **k: None)
