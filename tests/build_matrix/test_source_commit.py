"""build --cell copies the sources without .git; the commit they came from reaches the build info."""

import subprocess

from build_matrix.build import source_commit


def _git(root, *args):
    subprocess.run(
        ["git", "-C", str(root), *args],
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
            "PATH": "/usr/bin:/bin",
        },
    )


def test_source_commit_clean_dirty_and_outside_git(tmp_path):
    assert source_commit(tmp_path) is None
    _git(tmp_path, "init", "-q")
    (tmp_path / "setup.py").write_text("print('a')\n")
    _git(tmp_path, "add", "setup.py")
    _git(tmp_path, "commit", "-qm", "first")
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert len(head) == 40
    assert source_commit(tmp_path) == head
    (tmp_path / "setup.py").write_text("print('b')\n")
    assert source_commit(tmp_path) == head + "+dirty"
