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


def skip_unused_schema_formats() -> None:
    """Keep jsonschema from building a parser no notebook needs; call before anything imports nbformat.

    jsonschema (imported by nbformat and by nbgrader's Jupyter dependencies) compiles an Earley parser
    for RFC 3987 IRIs when the optional rfc3987_syntax is installed (jupyter_events asks for it):
    1.4 s in every grading process, measured, for a string format no notebook or gradebook schema uses.
    Marked absent, the format is simply not checked. The grading command calls this first thing.
    """
    sys.modules.setdefault("rfc3987_syntax", None)
