"""What a student's kernel may reach and consume: namespaces and hidden folders (sandbox), resource
limits and clean-up (limits).
"""
