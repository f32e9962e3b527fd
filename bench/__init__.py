"""Benchmarks (`make bench`): measured side by side in one run, written to bench/results.md."""
