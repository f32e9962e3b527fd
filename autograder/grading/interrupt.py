"""Stopping a run on Ctrl-C or SIGTERM: the driver alone decides, and the request is never lost.

A terminal's Ctrl-C (SIGINT) and `timeout` or a cancelled CI job (SIGTERM) reach the whole process group:
the driver, its workers and the class report's builder. The workers leave it to the driver (which stops
them and every kernel, pipeline.grade_in_parallel): a worker that died of it first broke the pool under
the driver, which then crashed instead of stopping cleanly. And the KeyboardInterrupt a handler raises is
lost when it lands in a weakref callback or a __del__ (seen: SQLAlchemy's), so the request is also
remembered for the driver to look at between two submissions.
"""

from __future__ import annotations

import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_requested = False


def stop_on_signals() -> None:
    """In the driver: Ctrl-C and SIGTERM raise KeyboardInterrupt, and are remembered (requested)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _request_stop)


def requested() -> bool:
    """Whether a stop was asked for, even if its KeyboardInterrupt was swallowed."""
    return _requested


def leave_to_the_driver() -> None:
    """In a worker or helper process: do nothing on Ctrl-C or SIGTERM; the driver stops it. A Python handler,
    not SIG_IGN, so that a program the process starts (a cold kernel) gets the default back."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _ignore)


def _request_stop(signum: int, frame: FrameType | None) -> None:
    global _requested
    _requested = True
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Left to the driver."""
