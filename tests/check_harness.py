"""The assertions of the tests/check_*.py scripts (standard library only): each expect() prints one
"ok" or "FAIL" line and counts the failures; finish() prints the count and gives the exit status.
The scripts run as `python3 tests/check_<name>.py`, so this folder is first on their path."""

failures = []


def expect(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def finish():
    """Prints "N failed" or "all passed"; 1 when anything failed, else 0."""
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0
