"""``pidurable worker``'s flags are checked before the host's ``--app``
factory runs: a bad lease setting is a one-line usage error (exit 2), and the
factory - which may open connections or start threads - is never called."""

from __future__ import annotations

import pytest

from pidurable.shell.cli import main


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--lease-seconds", "nan"], "duration must be a positive number of seconds, not nan"),
        (["--lease-seconds", "0"], "duration must be a positive number of seconds, not 0"),
        (["--renew-seconds", "inf"], "must be a positive number of seconds, not inf"),
        (["--concurrency", "0"], "--concurrency must be at least 1, not 0"),
    ],
)
def test_bad_worker_flags_are_refused_before_the_app_is_loaded(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # a module that does not exist: loading the app would be a different error
    argv = ["worker", "--dsn", "postgresql://127.0.0.1:1/none", "--app", "no_such_module_xyz:make", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "no_such_module_xyz" not in err, err
