"""Handler dependencies: ``requirements.txt`` in the handlers folder, installed for Lambda.

pip installs them for the functions' runtime and architecture without Docker: binary wheels
only (``--only-binary=:all:``), for ``--platform manylinux2014_<arch>`` and the runtime's
``--python-version``, into a target folder. That folder is kept in a cache keyed by the
requirements' text and the platform, so only the first synth after a change runs pip; a
package with no wheel for the platform fails the synth with pip's reason.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from s3queue.errors import ConfigError

REQUIREMENTS = "requirements.txt"
"""The file, in the handlers folder, that lists what the handlers import beyond the layer."""
CACHE_ENV = "S3QUEUE_BUILD_CACHE"
PIP_TIMEOUT = 600


@dataclass(frozen=True)
class Platform:
    """Where the packages will run: a CPython version and a Lambda architecture."""

    python_version: str
    """``"3.12"``."""
    machine: str
    """``"aarch64"`` (arm64) or ``"x86_64"``."""

    @classmethod
    def of(cls, runtime_name: str, architecture_name: str) -> Platform:
        """From CDK's names: ``python3.12`` and ``arm64`` / ``x86_64``."""
        version = runtime_name.removeprefix("python")
        machine = "aarch64" if architecture_name == "arm64" else "x86_64"
        return cls(version, machine)

    @property
    def tags(self) -> list[str]:
        """The platform tags Lambda's Amazon Linux 2023 (glibc 2.34) runs."""
        return [f"manylinux2014_{self.machine}", f"manylinux_2_28_{self.machine}"]


def requirements_of(handlers_dir: Path) -> Path | None:
    """The handlers folder's ``requirements.txt``, or None when it has none."""
    path = handlers_dir / REQUIREMENTS
    return path if path.is_file() else None


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "s3queue" / "lambda-dependencies"


def fingerprint(requirements: Path, platform: Platform) -> str:
    """What decides the installed packages: the file's text and the platform."""
    text = requirements.read_bytes()
    seed = f"{platform.python_version}|{platform.machine}|".encode()
    return hashlib.sha256(seed + text).hexdigest()[:20]


def install_command(requirements: Path, target: Path, platform: Platform) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        platform.python_version,
        *(option for tag in platform.tags for option in ("--platform", tag)),
        "--target",
        str(target),
        "--requirement",
        str(requirements),
    ]


def installed(requirements: Path, platform: Platform, cache: Path | None = None) -> Path:
    """A folder holding the packages `requirements` lists, built for `platform` (cached).

    Two synths at once may both run pip; the first to rename its folder into place wins.
    """
    root = cache or cache_root()
    final = root / fingerprint(requirements, platform)
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".install-", dir=root))
    try:
        done = subprocess.run(
            install_command(requirements, work / "packages", platform),
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            reason = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
            raise ConfigError(
                f"{requirements}: pip could not install it for Lambda (CPython "
                f"{platform.python_version}, {platform.tags[0]}, binary wheels only): "
                + " / ".join(reason)
            )
        try:
            (work / "packages").rename(final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final
