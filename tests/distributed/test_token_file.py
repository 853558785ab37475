"""Issue 44, item 11: a ``RAY_AUTH_TOKEN_PATH`` file that others may read is refused before Ray is reached."""

import os

import pytest

from llmgym.config import DistributedConfig
from llmgym.errors import AuthenticationError
from llmgym.llm.distributed.ray_runtime import check_token_file, start_ray

pytest.importorskip("ray")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_token_file_readable_by_others_is_refused_naming_the_path_and_chmod(tmp_path, monkeypatch, mode):
    token = tmp_path / "token"
    token.write_text("secret")
    os.chmod(token, mode)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    # Joining a cluster: refused before any connection (nothing listens on port 1).
    config = DistributedConfig(llm_processes=2, ray_address="127.0.0.1:1", timeout_s=5.0)
    with pytest.raises(
        AuthenticationError, match=rf"RAY_AUTH_TOKEN_PATH={token} .*mode {mode:o}.*`chmod 600 {token}`"
    ):
        start_ray(config)


def test_an_owner_only_token_file_passes(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("secret")
    for mode in (0o600, 0o400):
        os.chmod(token, mode)
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
        check_token_file()
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    check_token_file()
