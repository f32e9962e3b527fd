"""nbgrader preprocessors the kit adds to the autograde pipeline (see nbgrader_config.py)."""

from __future__ import annotations

import ast
import builtins
import json
import secrets
import time
import traceback
from functools import lru_cache

import nbformat
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for
from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell
from nbgrader.nbgraderformat import MetadataValidator, ValidationError
from nbgrader.nbgraderformat.common import BaseMetadataValidator
from nbgrader.preprocessors import CheckCellMetadata, Execute, NbGraderPreprocessor
from nbgrader.utils import is_grade, is_locked, is_solution
from traitlets import Float, Integer

from autograder.course import grade_id_of
from autograder.execution.kernel import SandboxedKernelManager
from autograder.grading.markers import METADATA_KEY, MarkerInbox, forget, marker_record
from autograder.grading.messages import bounded, message
from autograder.isolation.watchdog import describe
from autograder.judge.preprocess import JUDGED, KernelTransport, judged_cells, source_notebook
from autograder.judge.remote import KernelLink
from autograder.judge.session import JudgeSession
from dlkit import integrity

#: Error names the kit writes into cells it had to stop; results.describe_error reads them.
NOT_RUN = "CellNotRun"
NOTEBOOK_TIMEOUT = "NotebookTimeout"
KERNEL_DIED = "DeadKernelError"
#: How Python words ENOSPC: in the sandbox, the private scratch is full.
NO_SPACE = "[Errno 28] No space left on device"
#: Traceback entries an error output keeps (its last ones: where the error was raised).
TRACEBACK_ENTRIES = 50
#: Machine failures raised in this process since the last take_machine_failures(): the grader's own record of
#: what its code saw (a kernel that never answered, a grader cell that failed before any student code), kept
#: apart from every log, output and message, which a student's text can imitate.
_MACHINE_FAILURES: list[str] = []


def take_machine_failures() -> list[str]:
    """The machine failures recorded since the last call, oldest first; the record is emptied."""
    taken = list(_MACHINE_FAILURES)
    _MACHINE_FAILURES.clear()
    return taken


class KernelStartFailure(RuntimeError):
    """The kernel could not start, or failed before any student code ran: the grading machine's fault.

    Raised out of GuardedExecute so that nbgrader's autograde fails as a whole; the grader then
    retries the submission once with a cold kernel and, failing again, stops the run instead of
    recording a zero (see pipeline.grade_submission). Creating one records it (take_machine_failures):
    the pipeline learns of it from that record, never from text in nbgrader's log.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        _MACHINE_FAILURES.append(reason)


def error_output(name: str, message: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=name, evalue=message, traceback=[f"{name}: {message}"])


def capped_error(output: NotebookNode) -> NotebookNode:
    """An error output whose message is capped like every message (messages.py), and its traceback to its last
    TRACEBACK_ENTRIES entries, each capped: an exception's message is the submission's to choose."""
    traceback = [bounded(str(entry)) for entry in output.get("traceback", [])]
    dropped = len(traceback) - TRACEBACK_ENTRIES
    if dropped > 0:
        traceback = [f"[the grader dropped the first {dropped} entries of this traceback]"] + traceback[dropped:]
    return NotebookNode(output, evalue=message(str(output.get("evalue", ""))), traceback=traceback)


class GuardedExecute(Execute):
    """nbgrader's Execute, hardened so one submission can cost only its own points.

    Stock nbgrader loses every grade of a submission whose kernel dies, and after a cell times
    out it goes on sending cells to a kernel that may still be stuck (code that ignores SIGINT),
    paying the full timeout for each remaining cell. Here:
    - the whole notebook has a time budget (notebook_timeout) as well as each cell;
    - after a timeout, a kernel that does not answer within `stuck_grace` seconds is killed;
    - once the kernel is dead or killed, the remaining cells get an error output saying why
      they did not run, and grading goes on, so the cells that ran keep their grades;
    - output beyond `max_output_bytes` per cell is dropped as it arrives, but never a marker: messages on the
      marker channel (dlkit/channel.py) are taken out first and what a MarkerInbox accepts goes into the
      cell's metadata (markers.py), so a correct answer that prints megabytes keeps its markers;
    - every error output is capped (capped_error): nbgrader's Execute puts the kernel's reply back, whole,
      when the budget dropped the error's output, and a 50 MB exception message made a 400 MB notebook;
    - a kernel that cannot start, or that dies or fails in the grader's own first cell (inserted by
      GuardTests before any student cell), raises KernelStartFailure: that is never the student's doing.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)

    notebook_timeout = Integer(600, help="Seconds the whole notebook may run.").tag(config=True)
    stuck_grace = Float(5.0, help="Seconds a kernel gets to answer after an interrupt.").tag(config=True)
    max_output_bytes = Integer(2**20, help="Output bytes kept per cell.").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._deadline = time.monotonic() + self.notebook_timeout
        self._stopped: tuple[str, str] | None = None  # (error name, why) once execution was abandoned
        self._student_code_started = False
        self._inbox, self._cell, self._judge = MarkerInbox(), None, None
        for cell in nb.cells:
            forget(cell)
        try:
            return super().preprocess(nb, resources, km)
        except KernelStartFailure:
            raise
        except Exception as err:
            if self._student_code_started:
                raise
            raise KernelStartFailure(f"the kernel did not start: {type(err).__name__}: {err}") from err

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        self._cell = cell
        if grade_id_of(cell) in judged_cells(resources) and is_grade(cell) and not is_solution(cell):
            return self._judge_cell(cell, resources, index), resources
        cell, resources = self._run_cell(cell, resources, index)
        cell.outputs = [self._name_the_limit(capped_error(o)) if o.get("output_type") == "error" else o
                        for o in cell.outputs]
        return cell, resources

    def _name_the_limit(self, error: NotebookNode) -> NotebookNode:
        """A full disk in the sandbox is the kernel's private scratch reaching its cap: say which cap, so the
        student's row names the limit rather than only "No space left on device"."""
        scratch = getattr(self.km, "sandbox_scratch_bytes", None) if getattr(self.km, "sandbox_workdir", "") else None
        if scratch and NO_SPACE in str(error.get("evalue", "")):
            error.evalue = (f"{error.evalue} (the kernel's /tmp, /var/tmp, /dev/shm and home together may hold "
                            f"{describe(scratch)}: the scratch limit)")
        return error

    def _run_cell(self, cell, resources, index):
        """Run one code cell within the notebook's budget; a dead or stuck kernel stops the cells after it."""
        if index > 0:
            self._student_code_started = True
        elif self._stopped is None:
            return self._run_grader_cell(cell, resources, index)
        remaining = self._deadline - time.monotonic()
        if self._stopped is None and remaining <= 1:
            self._stopped = (NOTEBOOK_TIMEOUT, f"the notebook ran past its {self.notebook_timeout} s limit")
            self._kill_kernel()
        if self._stopped is not None:
            cell.outputs = [error_output(self._stopped[0], f"not run: {self._stopped[1]}")]
            return cell, resources
        cell_timeout = self.timeout
        self.timeout = max(1, int(min(cell_timeout, remaining)))
        self._output_bytes, self._output_truncated = 0, False
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            limit = self._limit_exceeded()
            self._stopped = (NOT_RUN, f"the kernel died while running cell {index}")
            cell.outputs.append(error_output(KERNEL_DIED, f"the grader killed the kernel: {limit}" if limit else
                                             "the kernel died while running this cell "
                                             "(os._exit, a crash, or the memory limit)"))
            return cell, resources
        except CellTimeoutError:  # raised when the kernel never went idle after the interrupt
            self._stopped = (NOT_RUN, f"cell {index} ran past the time limit and its kernel ignored the interrupt")
            cell.outputs.append(error_output("CellTimeoutError",
                                             f"ran past the {self.timeout} s limit and ignored the interrupt"))
            self._kill_kernel()
            return cell, resources
        finally:
            self.timeout = cell_timeout
        if any(o.get("ename") == "CellTimeoutError" for o in cell.outputs) and not self._kernel_answers():
            self._stopped = (NOT_RUN, f"cell {index} ran past the time limit and its kernel ignored the interrupt")
            self._kill_kernel()
        return cell, resources

    def _judge_cell(self, cell: NotebookNode, resources: dict, index: int) -> NotebookNode:
        """A test cell the judge decides (autograder/judge/): its code runs here, the student's functions in the
        kernel; the cell's outputs are the judge's, never the kernel's."""
        self._student_code_started = True
        remaining = self._deadline - time.monotonic()
        if self._stopped is None and remaining <= 1:
            self._stopped = (NOTEBOOK_TIMEOUT, f"the notebook ran past its {self.notebook_timeout} s limit")
            self._kill_kernel()
        cell.execution_count = None
        if self._stopped is not None:
            cell.outputs = [error_output(self._stopped[0], f"not run: {self._stopped[1]}")]
            return cell
        if getattr(self, "_judge", None) is None:
            link = KernelLink(KernelTransport(self), lambda: self._judge_deadline - time.monotonic())
            try:
                self._judge = JudgeSession(link, set(resources[JUDGED]["modules"]))
            except Exception as err:  # the judge's own imports: the grading machine's fault, never a student's zero
                raise KernelStartFailure(f"the grader's judge could not start: {type(err).__name__}: {err}") from err
        self._judge_deadline = time.monotonic() + min(self.timeout or remaining, remaining)
        test = judged_cells(resources)[grade_id_of(cell)]
        sent = self._judge.link.requests
        verdict = self._judge.run(grade_id_of(cell), test["source"], test["seed"])
        self.log.info("judged %s in %.2f s, %d requests to the kernel", grade_id_of(cell), verdict.seconds,
                      self._judge.link.requests - sent)
        printed = [NotebookNode(output_type="stream", name="stdout", text=verdict.printed)] if verdict.printed else []
        cell.outputs = printed
        if not verdict.passed:
            cell.outputs.append(error_output(verdict.ename, message(verdict.evalue)))
        if verdict.devices:
            cell.setdefault("metadata", NotebookNode())[METADATA_KEY] = {"devices": verdict.devices}
        if verdict.kernel_lost is not None:
            self._stopped = (NOT_RUN, f"the kernel stopped during cell {index}: {verdict.kernel_lost}")
            self._kill_kernel()
        return cell

    def _run_grader_cell(self, cell, resources, index):
        """Run the grader's own first cell; any failure there is the grading machine's, not the student's.

        The notebook's time budget starts here, with the kernel up: the wait for a kernel (a zygote still
        importing, a cold start on a loaded machine) is the machine's time, not the submission's.
        """
        self._deadline = time.monotonic() + self.notebook_timeout
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except (DeadKernelError, CellTimeoutError) as err:
            raise KernelStartFailure(f"the kernel died before any student code ran: "
                                     f"{type(err).__name__}: {err}") from err
        error = next((o for o in cell.outputs if o.get("output_type") == "error"), None)
        if error is not None:
            raise KernelStartFailure(f"the grader's first cell failed in the kernel: {error.get('ename')}: "
                                     f"{error.get('evalue')}")
        return cell, resources

    def _limit_exceeded(self) -> str | None:
        """Why the grader's watchdog killed the kernel (a fact of the grader's, never the kernel's word), if it did."""
        provisioner = getattr(self.km, "provisioner", None)
        return provisioner.limit_exceeded() if hasattr(provisioner, "limit_exceeded") else None

    def _kernel_answers(self) -> bool:
        """After an interrupt: does the kernel take a new request within stuck_grace seconds?"""
        saved = self.timeout
        self.timeout = max(1, int(self.stuck_grace))
        try:
            reply = self.wait_for_reply(self.kc.execute("", silent=True, store_history=False))
        except DeadKernelError:
            return False
        finally:
            self.timeout = saved
        return bool(reply) and reply["content"].get("status") == "ok"

    def _kill_kernel(self) -> None:
        if self.km is not None:
            try:
                run_sync(self.km.shutdown_kernel)(now=True)
            except Exception as err:  # already gone
                self.log.warning("could not shut the kernel down: %s", err)

    def output(self, outs, msg, display_id, cell_index):
        """Keep a cell's outputs until they pass max_output_bytes, then drop the rest with one note; hand markers to
        the inbox, outside the budget, and keep none of them as output."""
        record = marker_record(msg)
        if record is not None:
            self._inbox.take(self._cell, record, graders_cell=not self._student_code_started)
            return None
        self._output_bytes = getattr(self, "_output_bytes", 0) + len(json.dumps(msg.get("content", {}), default=str))
        if self._output_bytes <= self.max_output_bytes:
            return super().output(outs, msg, display_id, cell_index)
        if not getattr(self, "_output_truncated", False):
            self._output_truncated = True
            outs.append(NotebookNode(output_type="stream", name="stdout",
                                     text=f"[the grader dropped this cell's output beyond "
                                          f"{self.max_output_bytes} bytes]\n"))
        return None


class _CompiledSchemaCheck(BaseMetadataValidator):
    """nbgrader's per-cell schema check with the schema compiled once: jsonschema.validate, which nbgrader
    calls for every cell, first checks the schema itself against the JSON Schema meta-schema."""

    def validate_cell(self, cell: NotebookNode) -> None:
        meta = cell.metadata.get("nbgrader")
        if meta is None or meta.get("schema_version", 0) != self.schema_version:
            return super().validate_cell(cell)  # nbgrader's own, with its too-old and too-new errors
        error = best_match(self._compiled.iter_errors(meta))  # the error jsonschema.validate would raise
        if error is not None:
            raise error


class CompiledMetadataValidator(MetadataValidator, _CompiledSchemaCheck):
    """nbgrader's metadata validator (its version's checks of ids, points and cell types) whose schema check is
    _CompiledSchemaCheck: MetadataValidator.validate_cell's call to its base resolves there."""

    def __init__(self) -> None:
        super().__init__()
        self._compiled = validator_for(self.schema)(self.schema)


@lru_cache(maxsize=1)
def metadata_validator() -> CompiledMetadataValidator:
    """One per process: it holds nothing between notebooks, and building it reads three schema files."""
    return CompiledMetadataValidator()


class CheckCellMetadataOnce(CheckCellMetadata):
    """nbgrader's CheckCellMetadata, same verdicts and messages, with the schema compiled once per process.

    nbgrader's check re-validated its own schema for every grading cell: 13 ms of 14 for a 19-cell notebook,
    measured, and a submission is checked twice (before and after execution).
    """

    def preprocess(self, nb: NotebookNode, resources: dict):
        try:
            metadata_validator().validate_nb(nb)
        except ValidationError:
            self.log.error(traceback.format_exc())
            msg = "Notebook failed to validate; the nbgrader metadata may be corrupted."
            self.log.error(msg)
            raise ValidationError(msg)
        return nb, resources


class KeepWarningsFromCostingPoints(NbGraderPreprocessor):
    """Relabel stderr stream output as stdout, so warnings do not zero a passing test.

    nbgrader.utils.determine_grade scores a test cell 0 if any output is an error *or* a
    stderr stream. PyTorch deprecation warnings and TensorFlow logging go to stderr, so a correct
    answer would lose its points. A failing test still raises, which is an "error" output.
    """

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                output["name"] = "stdout"
        return cell, resources


class RestoreMissingCells(NbGraderPreprocessor):
    """Put back read-only and test cells a student deleted, where the instructor source has them.

    nbgrader's OverwriteCells restores the text of locked cells a student edited, but a
    deleted test cell simply vanishes from grading. This runs before OverwriteCells and
    re-inserts each missing locked cell after the nearest cell that precedes it in the
    source. Solution cells are never copied from the source.
    """

    def preprocess(self, nb, resources):
        source = source_notebook(self.config, resources)
        present = {grade_id_of(c) for c in nb.cells}
        previous = None
        for cell in source.cells:
            grade_id = grade_id_of(cell)
            if grade_id and grade_id not in present and is_locked(cell):
                at = next((i + 1 for i, c in enumerate(nb.cells) if previous and grade_id_of(c) == previous), 0)
                restored = nbformat.from_dict(cell)
                restored.outputs, restored.execution_count = [], None
                nb.cells.insert(at, restored)
                present.add(grade_id)
                self.log.warning("Restored deleted cell %s from the source", grade_id)
            if grade_id:
                previous = grade_id
        return nb, resources


GUARD_SNAPSHOT = ("import dlkit.integrity\n"
                  "dlkit.integrity.snapshot({modules!r})  # inserted by the grader before any student code")


def _test_names(source: str) -> tuple[list[str], list[str]]:
    """(modules a test cell imports, built-in names it reads without assigning them) from its source."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # e.g. IPython magics: no names, the cell is still checked
        return [], []
    modules, read, bound = [], set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.append(node.module)
            bound |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return modules, sorted(name for name in read - bound if name in vars(builtins))


class GuardTests(NbGraderPreprocessor):
    """Bracket every test cell with integrity checks (dlkit/integrity.py) and snapshot before student code.

    The snapshot cell imports what the test cells import, so those modules are watched. Each test
    cell starts and ends with a grader-written check request; the one at the end carries a nonce
    that the passing check's marker names (sent on the marker channel, signed: markers.py), which
    results.py requires of every test cell that raised nothing.
    """

    def preprocess(self, nb, resources):
        modules: list[str] = []
        judged = judged_cells(resources)
        for cell in nb.cells:
            if cell.cell_type == "code" and is_grade(cell) and grade_id_of(cell) not in judged:
                imported, used = _test_names(cell.source)
                modules += imported
                grade_id = grade_id_of(cell) or ""
                nonce = secrets.token_hex(8)
                cell.source = "\n".join([integrity.request("before", grade_id, used), cell.source,
                                         integrity.request("after", grade_id, used, nonce)])
        nb.cells.insert(0, new_code_cell(GUARD_SNAPSHOT.format(modules=list(dict.fromkeys(modules)))))
        return nb, resources


class SeedTests(NbGraderPreprocessor):
    """Seed every random generator at the top of each test cell, per student, assignment and test.

    Hidden tests draw "fresh random inputs"; unseeded, a regrade of the same notebook could score
    differently and a failure could not be reproduced. The seed (dlkit.seeding.seed_for) is printed
    in the cell, and results.py adds it to the failure message, so a TA can rerun the test with the
    same inputs: `dlkit.seed_everything(SEED)` before the test cell's code.
    """

    def preprocess(self, nb, resources):
        from dlkit.seeding import seed_for

        student, assignment = resources["nbgrader"]["student"], resources["nbgrader"]["assignment"]
        judged = judged_cells(resources)
        for cell in nb.cells:
            test = cell.cell_type == "code" and is_grade(cell) and not is_solution(cell)
            if test and grade_id_of(cell) not in judged:
                seed = seed_for(student, assignment, grade_id_of(cell))
                cell.source = (f"__import__('dlkit.seeding').seeding.seed_test({seed})  # inserted by the grader\n"
                               + cell.source)
        return nb, resources
