"""The kit's autograder: nbgrader around the course's notebooks, from instructor source to class report.

    autograder/
      paths.py, course.py     where the kit's files are; which assignments exist, what they import
      options.py              GradingOptions: every setting of a grading run, built by the command line
      nbgrader_config.py      nbgrader's configuration (release and grading pipelines), also for a TA's own nbgrader
      grade.py                `python -m autograder.grade SUBMISSIONS OUT`: flags -> GradingOptions -> grading.pipeline
      authoring/              the instructor's tools: release (nbgrader generate_assignment plus the Colab setup
                              cell and TA notebook), publish, slides, sample submissions
      grading/                the grading pipeline, in its order: intake (find and vet) -> recover (lost metadata)
                              -> autograde (a workspace and nbgrader autograde, with the kit's preprocessors)
                              -> results (rows per test and device) -> feedback -> gradebook, report, class_report;
                              around them pipeline (the whole class), engines (local or Dask workers),
                              schedule (longest first) and resume (skip what is graded)
      execution/              how a kernel starts: kernel (jupyter_client manager), warm and zygote (forked kernels)
      isolation/              what a kernel may do: sandbox (namespaces, hidden folders), limits (rlimits, clean-up)
      verify/                 the kit's checks of itself: accuracy (held-out corpus), gpu_check, colab_rehearsal
      submissions/, expected/, corpus/   sample submissions, what each must fail, held-out answers

docs/architecture.md walks through the same map in more detail.
"""

import sys

#: Optional string-format checkers jsonschema imports when installed (jupyter_events asks for them), with
#: what each cost the grading command's start, measured: an Earley parser for RFC 3987 IRIs (1.4 s),
#: ISO 8601 durations through arrow (23 ms), RFC 3986 URIs (7 ms).
UNUSED_SCHEMA_FORMATS = ("rfc3987_syntax", "isoduration", "rfc3986_validator")


def skip_unused_schema_formats() -> None:
    """Keep jsonschema from loading format checkers no notebook needs; call before anything imports nbformat.

    jsonschema (imported by nbformat and by nbgrader's Jupyter dependencies) loads every optional format
    checker it finds installed (UNUSED_SCHEMA_FORMATS), for string formats that no notebook or gradebook
    schema uses and that nothing in the grader checks (jsonschema checks formats only when handed a format
    checker). Marked absent, they are simply not loaded. The grading command calls this first thing.
    """
    for name in UNUSED_SCHEMA_FORMATS:
        sys.modules.setdefault(name, None)
