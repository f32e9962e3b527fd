"""The judge: hidden tests run in the grader's process, outside the student's sandbox (docs/design.md, "The judge")."""
