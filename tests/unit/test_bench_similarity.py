"""bench/similarity.py: its synthetic class finds every planted copy, and it rewrites only its own section of
bench/results.md (make bench writes the rest)."""

from __future__ import annotations

from bench.similarity import HEADING, measure, section, update_results


def test_a_small_synthetic_class_flags_every_planted_copy_and_little_else():
    m = measure(students=150, assignments=1, exercises=3, repeats=1)
    assert m.answers == 450 and m.planted == 9
    assert m.found == m.planted and m.flagged <= m.planted + 2
    assert f"| 450 | **{m.median:.1f} s** |" in section(m)


def test_only_the_similarity_section_of_results_md_is_replaced(tmp_path):
    results = tmp_path / "results.md"
    results.write_text(f"# Grading benchmark\n\n| class | stock |\n\n{HEADING}\n\nold numbers\n\n## Later\n\nkept\n")
    update_results(results, f"{HEADING}\n\nnew numbers\n")
    text = results.read_text()
    assert text == f"# Grading benchmark\n\n| class | stock |\n\n{HEADING}\n\nnew numbers\n\n## Later\n\nkept\n"
    fresh = tmp_path / "fresh.md"
    update_results(fresh, f"{HEADING}\n\nfirst\n")
    assert fresh.read_text() == f"{HEADING}\n\nfirst\n"
