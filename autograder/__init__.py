"""The kit's grading pipeline around nbgrader: build the student release, grade a class.

Each step is its own module: `course` (paths and config), `release` (generate_assignment),
`intake` (find and vet submissions), `autograde` (nbgrader autograde of one submission in its
own workspace), `results` (per-test rows), `feedback` (what a student sees), `grade` (the CLI
that runs them for a whole class).
"""

import sys

# jsonschema (imported by nbformat and by nbgrader's Jupyter dependencies) compiles an Earley parser
# for RFC 3987 IRIs when the optional rfc3987_syntax is installed (jupyter_events asks for it):
# 1.4 s in every grading process, measured, for a string format no notebook or gradebook schema
# uses. Marked absent here, before anything imports jsonschema, the format is simply not checked.
sys.modules.setdefault("rfc3987_syntax", None)
