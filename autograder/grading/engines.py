"""Where submissions are graded: a pool of local worker processes, or a Dask cluster past one machine.

Both engines run the same task (grade.grade_submission) in long-lived worker processes that were
prepared once (init_worker: resource limits, a log file, child-subreaper), so a worker's warm
zygote serves many submissions. Results come back to the one process that drives the run, which
alone writes OUT's CSVs and the class gradebook. Either engine is a concurrent.futures Executor:
the driver submits, collects with concurrent.futures.as_completed, and abandons the rest with
`shutdown(wait=False, cancel_futures=True)`.

Dask (`--engine dask`): without a scheduler address, a local cluster of `workers` processes;
with one (`--scheduler tcp://host:8786`), the cluster's workers. Every machine must see the kit
checkout, the submissions and OUT at the same paths (a shared file system), and its workers must
run one task at a time (`dask worker ADDRESS --nthreads 1`), since each task owns its worker's
child processes while it runs.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import sys
import warnings
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine

from autograder.grading import interrupt
from autograder.isolation.limits import Limits, apply_process_limits


def init_worker(log_dir: Path, limits: Limits, kernel_env: dict[str, str]) -> None:
    """Prepare a grading worker: the environment and limits every kernel it starts inherits, its own
    output to a log file. Runs in the worker process, never in the one that drives the run."""
    os.environ.update(kernel_env)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / f"worker-{os.uname().nodename}-{os.getpid()}.log", "ab", buffering=0)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
        os.dup2(log.fileno(), stream.fileno())
    warnings.filterwarnings("ignore", module="nbgrader")  # SQLAlchemy chatter inside nbgrader
    event.listen(Engine, "connect", _scratch_sqlite)
    for problem in apply_process_limits(limits):
        print(f"WARNING: {problem}", file=sys.stderr)


def _init_local_worker(log_dir: Path, limits: Limits, kernel_env: dict[str, str]) -> None:
    """init_worker, and Ctrl-C or SIGTERM to the run's process group left to the driver (interrupt.py)."""
    init_worker(log_dir, limits, kernel_env)
    interrupt.leave_to_the_driver()


def _scratch_sqlite(connection, _record) -> None:
    """A worker's SQLite databases are its workspace gradebooks, copies thrown away after each submission
    (the class gradebook is the driver's): nothing in them needs to survive a crash, so their ~40 commits a
    submission skip the disk flushes and the journal file (~1 ms each, measured)."""
    if isinstance(connection, sqlite3.Connection):
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("PRAGMA journal_mode = MEMORY")


def _ready() -> None:
    """A task that does nothing: submitted once, it makes the pool start all its workers."""


@contextmanager
def local_engine(workers: int, log_dir: Path, limits: Limits, kernel_env: dict[str, str]
                 ) -> Iterator[ProcessPoolExecutor]:
    """`workers` processes on this machine, forked from this one on Linux (spawned elsewhere).

    A forked worker starts in milliseconds with the grader's modules already imported; a spawned
    one re-imports them (~2-3 s per run, measured, which a class of one submission waits for). They
    are all forked here, before the caller starts any thread (tqdm's monitor, the pool's own manager
    thread), so no lock can be inherited held; the one thread running already is the report builder's
    pool manager (spare_cpu_process), which holds only that pool's locks, and no worker touches that pool.
    macOS gets spawn: its system libraries are not fork-safe.

    What the driver holds by then (the grader's imports: nbgrader, nbconvert, SQLAlchemy) is moved to the
    collector's permanent generation first (gc.freeze), so the workers' collections skip it: 26 ms of
    collection a submission in a worker before, 7 ms after (measured), and fewer pages copied on write.
    Once the pool is done they are given back to the driver's own collector.
    """
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    gc.freeze()
    pool = ProcessPoolExecutor(max_workers=max(1, workers), mp_context=get_context(method),
                               initializer=_init_local_worker, initargs=(log_dir, limits, kernel_env))
    try:
        pool.submit(_ready).result()  # forks every worker now (a fork pool starts them all at once)
        yield pool
    finally:
        pool.shutdown()
        gc.unfreeze()


def _lowest_priority() -> None:
    os.nice(19)
    interrupt.leave_to_the_driver()


@contextmanager
def spare_cpu_process() -> Iterator[ProcessPoolExecutor]:
    """One process at the lowest CPU priority (nice 19), for the driver's own work during a run.

    The driver's work while the workers grade (the class report's figures: ~0.3 s of CPU per assignment)
    took cores from the kernels. At nice 19 it runs on what the kernels leave idle (a kernel waiting for its
    DataLoader workers or DDP ranks, a worker waiting for its next kernel) and hardly slows them. Forked like
    the workers, before the run starts any thread.
    """
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    pool = ProcessPoolExecutor(max_workers=1, mp_context=get_context(method), initializer=_lowest_priority)
    try:
        pool.submit(_ready).result()
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


@contextmanager
def dask_engine(workers: int, log_dir: Path, limits: Limits, kernel_env: dict[str, str],
                scheduler: str | None = None) -> Iterator[Executor]:
    """A Dask client's executor: on a local cluster of `workers` single-threaded processes, or on the cluster
    at `scheduler`."""
    from distributed import Client, LocalCluster, WorkerPlugin
    from distributed.cfexecutor import ClientExecutor

    class DaskExecutor(ClientExecutor):
        """distributed's concurrent.futures executor (what Client.get_executor returns), owning its client
        and local cluster: shutdown closes them, which stops tasks already running. ClientExecutor.shutdown
        takes no `cancel_futures`; its shutdown(wait=False) cancels every task."""

        def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
            super().shutdown(wait=wait and not cancel_futures)
            client.close()
            if cluster is not None:
                cluster.close()

    class PrepareWorker(WorkerPlugin):
        name = "dl-hwsw-grading"

        def setup(self, worker) -> None:
            init_worker(log_dir, limits, kernel_env)  # on another machine too: the driver's settings travel

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=True,
                               memory_limit=0, dashboard_address=None, silence_logs=40)
    client = Client(cluster or scheduler)
    executor = DaskExecutor(client, pure=False)  # every task grades anew: never a cached result
    try:
        client.register_plugin(PrepareWorker())
        yield executor
    finally:
        executor.shutdown()
