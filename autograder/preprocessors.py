"""nbgrader preprocessors the kit adds to the autograde pipeline."""

from __future__ import annotations

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor


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
