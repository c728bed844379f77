"""Another repository's view: the wheel installed into a fresh virtualenv, used from outside.

One virtualenv per session: ``pip wheel . --no-deps`` builds the wheel, and pip installs it with
the ``local`` and ``cdk`` extras from pip's usual index (its cache, after ``make install``).
Nothing of this checkout is on the path: the commands run in a folder of their own, with
the new virtualenv's ``s3queue`` and ``python``. Run it alone with ``make install-test``
(``pytest -m install``); it is part of ``make test``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.install, pytest.mark.s3]

REPO = Path(__file__).resolve().parents[1]
HANDLER = """
import json
import os

import humanize
from s3queue import Message


def handle(message: Message) -> None:
    out = os.path.join(os.environ["JOBS_OUT"], message.id + ".json")
    with open(out, "w") as f:
        json.dump({"n": humanize.intcomma(message.body["n"])}, f)
"""
APP = """
from pathlib import Path

from aws_cdk import App
from s3queue_cdk import S3QueueStack

app = App(outdir="cdk.out")
stack = S3QueueStack(app, "Jobs", handlers_dir=Path("jobs"))
app.synth()
print(stack.stack_name, sorted(stack.handlers))
"""


@dataclass
class Venv:
    root: Path
    project: Path

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A command of the virtualenv (``s3queue``, ``python``) in the project folder."""
        command = [str(self.root / "bin" / args[0]), *args[1:]]
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("S3QUEUE_", "PYTHON"))}
        clean["PATH"] = f"{self.root / 'bin'}{os.pathsep}{clean.get('PATH', '')}"
        return subprocess.run(
            command,
            cwd=self.project,
            env={**clean, **(env or {})},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    # GIVEN the wheel this checkout builds, installed with its extras into a new virtualenv
    work = tmp_path_factory.mktemp("install")
    pip = [sys.executable, "-m", "pip"]
    quiet = ["--quiet", "--disable-pip-version-check"]
    fast = ["--no-compile"]  # no .pyc at install (30 of its 44 s here): imports compile theirs
    subprocess.run(
        [*pip, "wheel", *quiet, "--no-deps", "--wheel-dir", str(work / "dist"), str(REPO)],
        check=True,
        timeout=600,
    )
    (wheel,) = (work / "dist").glob("s3queue-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True, timeout=600)
    python = str(work / "venv" / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", *quiet, *fast, f"{wheel}[local,cdk]", "humanize>=4.9"],
        check=True,
        timeout=900,
    )
    # AND a project of another repository: one handler folder, its requirements.txt
    project = work / "project"
    (project / "jobs").mkdir(parents=True)
    (project / "jobs" / "resize.py").write_text(HANDLER)
    (project / "jobs" / "requirements.txt").write_text("humanize>=4.9\n")
    (project / "app.py").write_text(APP)
    yield Venv(work / "venv", project)


def test_the_library_comes_from_the_wheel(venv: Venv) -> None:
    done = venv.run("python", "-c", "import s3queue, s3queue_cdk; print(s3queue.__file__)")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(venv.root)


def test_enqueue_and_drain_with_the_installed_command(venv: Venv, seaweed: Any) -> None:
    bucket = f"install-{uuid.uuid4().hex[:12]}"
    seaweed.create_bucket(bucket)
    out = venv.project / "out"
    out.mkdir()
    env = {
        "S3QUEUE_ENDPOINT_URL": seaweed.endpoint_url,
        "S3QUEUE_BUCKET": bucket,
        "AWS_ACCESS_KEY_ID": "s3queue",
        "AWS_SECRET_ACCESS_KEY": "s3queue-secret",
        "AWS_REGION": "us-east-1",
        "JOBS_OUT": str(out),
    }
    # WHEN a message is enqueued with the installed `s3queue`, and `dev --drain` runs
    enqueued = venv.run(
        "s3queue", "enqueue", "--handlers", "jobs", "resize", '{"n": 1234567}', env=env
    )
    assert enqueued.returncode == 0, enqueued.stderr
    message_id = enqueued.stdout.strip()
    drained = venv.run("s3queue", "dev", "--drain", "--handlers", "jobs", env=env)
    # THEN the handler of the project's folder ran it
    assert drained.returncode == 0, drained.stderr
    assert json.loads((out / f"{message_id}.json").read_text()) == {"n": "1,234,567"}
    assert "drained" in drained.stdout


def test_dev_runs_the_embedded_server_of_the_local_extra(venv: Venv) -> None:
    # WHEN `s3queue dev --drain` runs with no endpoint: the SeaweedFS of the `local` extra
    done = venv.run("s3queue", "dev", "--drain", "--handlers", "jobs", env={"JOBS_OUT": "."})
    # THEN it started, drained the (empty) queue, and kept its data in the project's folder
    assert done.returncode == 0, done.stderr
    assert "Embedded S3 at http://127.0.0.1:" in done.stderr
    assert (venv.project / ".s3queue-dev" / "s3" / "weed.log").is_file()


def test_another_cdk_app_synthesizes_the_construct(venv: Venv) -> None:
    # WHEN a CDK app of the project instantiates the stack with its own handlers folder
    done = venv.run("python", "app.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Jobs", "['resize']"]
    # THEN the template holds its worker, whose asset is the package's entry point, the
    # project's handler and the handler's package, built for Lambda
    outdir = venv.project / "cdk.out"
    assets = json.loads((outdir / "Jobs.assets.json").read_text())["files"]
    paths = [outdir / a["source"]["path"] for a in assets.values()]
    (worker,) = [p for p in paths if (p / "handlers").is_dir()]
    assert (worker / "handlers" / "resize.py").is_file()
    assert (worker / "worker" / "app.py").is_file()
    assert (worker / "humanize" / "__init__.py").is_file()
    # AND the layer is the installed package, without the local tools
    (layer,) = [p for p in paths if (p / "python").is_dir()]
    assert (layer / "python" / "s3queue" / "working" / "worker.py").is_file()
    assert not (layer / "python" / "s3queue" / "local").exists()
    (coordinator,) = [p for p in paths if (p / "app.py").is_file()]
    assert "coordinator" in (coordinator / "app.py").read_text()
