"""Stopping the local servers the devtools start (Kafka, the registry, SeaweedFS), one way."""

from __future__ import annotations

import contextlib
import signal
import subprocess


def stop_process(proc: subprocess.Popen | None, grace_s: float) -> None:
    """SIGTERM (a clean shutdown), SIGKILL after ``grace_s`` seconds; nothing for a process that
    is gone. SIGCONT first: a paused process (the tests pause servers) cannot handle SIGTERM."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
