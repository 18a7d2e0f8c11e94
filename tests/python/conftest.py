"""Shared by the Python suites: keeps each test's call report on its item, so the daemon fixture
of daemon_harness.py can print the daemon's log when a test fails."""

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: D103
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
