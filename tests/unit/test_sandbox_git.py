"""The sandbox hides the repository's history also when the kit is checked out as a git worktree."""

from autograder.isolation import sandbox


def test_a_worktree_hides_its_git_file_and_the_main_git_folder(tmp_path):
    main_git = tmp_path / "main" / ".git"
    (main_git / "worktrees" / "wt").mkdir(parents=True)
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {main_git / 'worktrees' / 'wt'}\n")
    assert sandbox.git_dirs(worktree) == [worktree / ".git", main_git]


def test_a_plain_checkout_hides_its_git_folder(tmp_path):
    (tmp_path / ".git").mkdir()
    assert sandbox.git_dirs(tmp_path) == [tmp_path / ".git"]
