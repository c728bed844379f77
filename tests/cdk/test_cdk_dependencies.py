"""Handler dependencies: ``handlers/requirements.txt`` is installed into the workers' asset.

pip installs binary wheels for Lambda's CPython and architecture (arm64), never this machine's,
and without Docker. These tests reach PyPI (as ``make install`` does) for small wheels.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cdk_support import Synth, synth
from s3queue.errors import ConfigError
from s3queue_cdk.dependencies import Platform, install_command, installed
from s3queue_cdk.functions import ARCHITECTURE, RUNTIME
from s3queue_cdk.stack import FUNCTIONS_DIR

pytestmark = pytest.mark.cdk

LAMBDA = Platform.of(RUNTIME.name, ARCHITECTURE.name)


def staged_worker_asset(synthesized: Synth, queue: str) -> Path:
    asset = synthesized.workers()[queue]["Code"]["S3Key"].removesuffix(".zip")
    return Path(synthesized.stack.node.root.outdir) / f"asset.{asset}"  # type: ignore[attr-defined]


def copy_functions(tmp_path: Path) -> Path:
    target = tmp_path / "functions"
    shutil.copytree(FUNCTIONS_DIR, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_the_platform_is_the_functions_own() -> None:
    assert Platform("3.12", "aarch64") == LAMBDA
    command = install_command(Path("r.txt"), Path("out"), LAMBDA)
    assert "--only-binary=:all:" in command
    assert command[command.index("--python-version") + 1] == "3.12"
    assert command[command.index("--platform") + 1] == "manylinux2014_aarch64"


def test_the_default_worker_asset_holds_entry_point_handlers_and_packages(default: Synth) -> None:
    # GIVEN the repository's handlers, generate_report importing humanize (requirements.txt)
    staged = staged_worker_asset(default, "generate_report")
    # THEN the asset is the task root Lambda needs: worker/, handlers/ and humanize beside them
    assert (staged / "worker" / "app.py").is_file()
    assert (staged / "handlers" / "generate_report.py").is_file()
    assert (staged / "humanize" / "__init__.py").is_file()
    assert list(staged.glob("humanize-*.dist-info"))
    # AND nothing the functions do not run
    assert not (staged / "coordinator").exists()
    assert not list(staged.rglob("*.md"))
    assert not list(staged.rglob("__pycache__"))


def test_every_worker_shares_one_asset(default: Synth) -> None:
    keys = {props["Code"]["S3Key"] for props in default.workers().values()}
    assert len(keys) == 1


def test_without_requirements_only_the_code_ships(tmp_path: Path) -> None:
    functions = copy_functions(tmp_path)
    (functions / "handlers" / "requirements.txt").unlink()
    (functions / "handlers" / "generate_report.py").unlink()  # it imports humanize
    staged = staged_worker_asset(synth(functions_dir=functions), "send_email")
    assert {p.name for p in staged.iterdir()} == {"worker", "handlers"}


def test_a_bad_requirements_file_fails_the_synth_naming_it(tmp_path: Path) -> None:
    functions = copy_functions(tmp_path)
    (functions / "handlers" / "requirements.txt").write_text("humanize>=4.9\nnot a requirement!\n")
    with pytest.raises(ConfigError, match=r"requirements\.txt: pip could not install it"):
        synth(functions_dir=functions)


def test_a_compiled_package_is_installed_for_arm64_not_this_machine(tmp_path: Path) -> None:
    # GIVEN a requirement with compiled code (MarkupSafe ships a C speedup per platform)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("markupsafe==3.0.2\n")
    # WHEN it is installed for the functions' platform
    folder = installed(requirements, LAMBDA, cache=tmp_path / "cache")
    # THEN the extension module is the aarch64 CPython 3.12 build
    (extension,) = (folder / "markupsafe").glob("_speedups*.so")
    assert "cpython-312-aarch64-linux-gnu" in extension.name
    # AND a second call finds it in the cache instead of running pip
    assert installed(requirements, LAMBDA, cache=tmp_path / "cache") == folder
