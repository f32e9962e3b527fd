"""Both engines are concurrent.futures Executors (engines.py): results come back through
concurrent.futures.as_completed, and shutdown(wait=False, cancel_futures=True) abandons what is left
without waiting for the task that is running (what the pipeline does on Ctrl-C or a broken grader)."""

from __future__ import annotations

import time
from concurrent.futures import CancelledError, as_completed

import pytest

from autograder.grading.engines import dask_engine, local_engine
from autograder.isolation.limits import Limits


def _square(x: int) -> int:
    return x * x


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


@pytest.mark.parametrize("engine", [local_engine, dask_engine])
def test_engine_collects_with_as_completed_and_cancels_on_shutdown(engine, tmp_path):
    with engine(1, tmp_path / "logs", Limits(), {}) as pool:
        futures = {pool.submit(_square, x): x for x in range(4)}
        assert sorted((futures[f], f.result()) for f in as_completed(futures, timeout=60)) == [
            (x, x * x) for x in range(4)]

        pool.submit(_sleep, 5)
        queued = [pool.submit(_square, x) for x in range(5)]  # one worker, busy: the last have not started
        time.sleep(1)
        start = time.monotonic()
        pool.shutdown(wait=False, cancel_futures=True)
        assert time.monotonic() - start < 20, "abandoning does not wait for the running task"
        with pytest.raises(CancelledError):
            queued[-1].result(timeout=20)
