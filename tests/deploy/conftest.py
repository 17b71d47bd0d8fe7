"""The deploy tests need tools a developer's machine may lack: systemd-analyze for the units, podman (with a base
image made by debootstrap) and Debian's chromium for the image. Without them they skip with the command that brings
them, unless AMP_LAB_REQUIRE_DEPLOY=1 (CI, which installs them first), where a missing tool fails the test."""

import os
import shutil

import pytest

REQUIRE_ENV = "AMP_LAB_REQUIRE_DEPLOY"


@pytest.fixture
def need():
    """`need("podman", "debootstrap")`: skip the test (fail it under AMP_LAB_REQUIRE_DEPLOY=1) without them."""

    def check(*commands: str) -> None:
        missing = [command for command in commands if shutil.which(command) is None]
        if missing:
            message = f"needs {' and '.join(missing)}: `apt-get install` them (.ci/run does) to run it"
            if os.environ.get(REQUIRE_ENV) == "1":
                pytest.fail(f"{REQUIRE_ENV}=1, but this test {message}")
            pytest.skip(message)

    return check
