"""How a grading kernel starts: jupyter_client's manager launching into the sandbox, cold or forked
from a warm zygote.
"""
