"""Prints the document blocks the doc test skipped, with their reasons, at
the end of the run, so that what is not executed stays visible."""


def pytest_terminal_summary(terminalreporter):
    try:
        from test_docs import SKIPPED
    except ImportError:
        return
    if SKIPPED:
        terminalreporter.section("document blocks not run")
        for where, reason in SKIPPED:
            terminalreporter.write_line(f"{where}: {reason}")
