"""``pidurable serve`` as a user runs it: a real process on a free port that
prints where it serves and the token, answers with it, and stops cleanly on
SIGINT; a token file is created private and reused; bad flags are one line."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
PIDURABLE = [str(Path(sys.executable).with_name("pidurable"))]


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PIDURABLE, "serve", "--db", str(tmp_path / "s.sqlite"), "--port", "0", "--app", "scripted_app:setup", *extra],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    return proc.returncode, out, err


def test_serve_prints_the_url_and_token_answers_and_stops_on_sigint(tmp_path: Path) -> None:
    """The banner names the URL and the token; the API answers with the token
    (401 without); SIGINT ends it with status 0 and 'stopped'."""
    proc = _start(tmp_path)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("pidurable: serving "), line + (proc.stderr.read() if proc.poll() is not None else "")  # type: ignore[union-attr]
        url = line.split(" at ")[1].strip().rstrip("/")
        link = proc.stdout.readline()  # type: ignore[union-attr]
        token = link.split("#token=")[1].strip()
        assert httpx.get(f"{url}/api/conversations").status_code == 401
        r = httpx.get(f"{url}/api/conversations", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json()[0]["id"] == 1
        assert httpx.get(url + "/").status_code == 200
    finally:
        status, out, err = _stop(proc)
    assert status == 0, err
    assert "pidurable: stopped" in out


def test_token_file_is_created_private_and_reused(tmp_path: Path) -> None:
    """--token-file FILE: created (mode 0600) with a new token that is not
    printed; the next start reads the same token."""
    token_file = tmp_path / "token"
    for _ in range(2):
        proc = _start(tmp_path, "--token-file", str(token_file))
        try:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            url = line.split(" at ")[1].strip().rstrip("/")
            banner = proc.stdout.readline()  # type: ignore[union-attr]
            assert "token" in banner and "#token=" not in banner
            token = token_file.read_text().strip()
            assert token not in banner
            r = httpx.get(f"{url}/api/usage", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200
        finally:
            assert _stop(proc)[0] == 0
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600


def test_bad_flags_are_one_line_errors(tmp_path: Path) -> None:
    """An --app that cannot be imported, or --app with --model, is one line, exit 2."""
    for extra in (["--app", "no_such_module:setup"], ["--app", "scripted_app:setup", "--model", "openai:x"]):
        r = subprocess.run([*PIDURABLE, "serve", "--db", str(tmp_path / "x.sqlite"), *extra], cwd=HERE, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("pidurable: error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
