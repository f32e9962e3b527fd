"""The grading pipeline: intake -> recover -> autograde -> results -> feedback -> gradebook and reports
(see pipeline.py).
"""
