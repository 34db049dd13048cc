"""scripts/submit_job.py finds the Ray auth token where Ray's clients do, and never prints it."""

from __future__ import annotations

import shlex

import pytest

from scripts.submit_job import ClusterAuthError, load_auth_token, main, ray_auth_env

TOKEN = "ab" * 32


@pytest.fixture
def home(monkeypatch, tmp_path):
    """A HOME of our own with no token anywhere Ray would look."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    return tmp_path


def test_token_sources_in_rays_order(home, monkeypatch):
    assert load_auth_token() is None
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("default-token\n")
    assert load_auth_token().value == "default-token"  # surrounding whitespace stripped, as Ray does
    (home / "path_token").write_text("path-token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(home / "path_token"))
    assert load_auth_token().value == "path-token"
    monkeypatch.setenv("RAY_AUTH_TOKEN", " env-token ")
    assert load_auth_token().value == "env-token"
    (home / "flag_token").write_text(TOKEN)
    flagged = load_auth_token(str(home / "flag_token"))  # the flag beats them all
    assert flagged.value == TOKEN and flagged.headers() == {"Authorization": f"Bearer {TOKEN}"}
    assert TOKEN not in repr(flagged) and TOKEN not in str(flagged)


def test_a_named_token_file_that_is_missing_or_empty_is_an_error(home, monkeypatch):
    with pytest.raises(ClusterAuthError, match="--token-file"):
        load_auth_token(str(home / "missing"))
    (home / "empty").write_text("\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(home / "empty"))
    with pytest.raises(ClusterAuthError, match="is empty"):
        load_auth_token()
    monkeypatch.setenv("RAY_AUTH_TOKEN", "")  # empty counts as unset, as for Ray
    with pytest.raises(ClusterAuthError, match="RAY_AUTH_TOKEN_PATH"):
        load_auth_token()


def test_printed_command_carries_the_token_file_not_the_token(home, monkeypatch, capsys):
    job = ["--", "pipelines.synthetic", "--set", "num_scenes=2"]
    line = main(job)  # no token anywhere: the plain command, and a note on stderr
    assert line.startswith("ray job submit ") and "no Ray auth token found" in capsys.readouterr().err
    (home / "tok").write_text(TOKEN)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "some-other-token")
    line = main(["--token-file", str(home / "tok"), *job])
    assert TOKEN not in line and "some-other-token" not in line
    env = dict(a.split("=", 1) for a in shlex.split(line)[:3])
    # The file, with the env token that would win over it blanked (Ray skips an empty value).
    assert env == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "", "RAY_AUTH_TOKEN_PATH": str(home / "tok")}
    assert shlex.split(line)[3:6] == ["ray", "job", "submit"]
    # A token Ray finds by itself needs only token mode turned on.
    assert ray_auth_env(load_auth_token()) == {"RAY_AUTH_MODE": "token"}
    assert ray_auth_env(None) == {}


def test_main_reports_an_unreadable_token_file(home):
    with pytest.raises(SystemExit, match="cannot read the Ray auth token"):
        main(["--submit", "--token-file", str(home / "missing"), "--", "pipelines.synthetic"])
