"""The kit's grading pipeline around nbgrader: build the student release, grade a class.

Each step is its own module: `course` (paths and config), `release` (generate_assignment),
`intake` (find and vet submissions), `autograde` (nbgrader autograde of one submission in its
own workspace), `results` (per-test rows), `feedback` (what a student sees), `grade` (the CLI
that runs them for a whole class).
"""
