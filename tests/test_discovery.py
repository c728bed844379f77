"""Handler discovery: modules become queues, SETTINGS is read with `ast`, never imported."""

from __future__ import annotations

from pathlib import Path

import pytest
from s3queue.contract.discovery import HandlerSpec, discover_handlers, read_handler
from s3queue.contract.settings import QueueSettings
from s3queue.errors import ConfigError

REPO_HANDLERS = Path(__file__).resolve().parents[1] / "functions" / "handlers"


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_each_public_module_is_a_queue_named_after_its_file(tmp_path: Path) -> None:
    write(tmp_path, "send_email.py", "def handle(message): ...\n")
    write(tmp_path, "generate-report.py", "def handle(message): ...\n")
    write(tmp_path, "_helpers.py", "X = 1\n")
    write(tmp_path, "__init__.py", "")
    write(tmp_path, "notes.txt", "not a module")
    (tmp_path / "package").mkdir()

    found = discover_handlers(tmp_path)

    assert list(found) == ["generate-report", "send_email"]
    assert found["send_email"] == HandlerSpec(
        queue="send_email", path=tmp_path / "send_email.py", settings=QueueSettings()
    )


def test_settings_literal_overrides_the_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "resize.py",
        'SETTINGS = {"visibility_timeout": 90, "max_retries": 2, "memory": 1024}\n'
        "def handle(message): ...\n",
    )
    settings = read_handler(path).settings
    assert (settings.visibility_timeout, settings.max_retries, settings.memory) == (90.0, 2, 1024)
    assert settings.timeout == 90, "timeout defaults to at least the visibility timeout"


def test_annotated_settings_and_the_last_assignment_count(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "q.py",
        "from typing import Any\n"
        'SETTINGS: dict[str, Any] = {"batch_size": 3}\n'
        'SETTINGS = {"batch_size": 4}\n'
        "def handle(message): ...\n",
    )
    assert read_handler(path).settings.batch_size == 4


def test_the_module_is_never_imported(tmp_path: Path) -> None:
    # GIVEN a module that would fail loudly if it were executed
    path = write(
        tmp_path,
        "q.py",
        "import module_that_does_not_exist\n"
        "raise SystemExit('imported!')\n"
        'SETTINGS = {"batch_size": 2}\n'
        "def handle(message): ...\n",
    )
    assert read_handler(path).settings.batch_size == 2


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('SETTINGS = {"visibilty_timeout": 5}\ndef handle(m): ...\n', "unknown settings"),
        ("SETTINGS = dict(batch_size=2)\ndef handle(m): ...\n", "must be a dict literal"),
        ('SETTINGS = {"batch_size": LIMIT}\ndef handle(m): ...\n', "literal dict of constants"),
        ("SETTINGS = {1: 2}\ndef handle(m): ...\n", "keys must be strings"),
        ('SETTINGS = {"batch_size": "ten"}\ndef handle(m): ...\n', "must be a number"),
        ('SETTINGS = {"visibility_timeout": 90, "timeout": 30}\ndef handle(m): ...\n', "at least"),
        ("def handler(message): ...\n", "no module-level `handle"),
        ("def handle(message):\n  return (\n", "not valid Python"),
    ],
)
def test_a_bad_module_is_a_config_error_naming_the_file(
    tmp_path: Path, source: str, message: str
) -> None:
    write(tmp_path, "broken.py", source)
    with pytest.raises(ConfigError, match=message) as caught:
        discover_handlers(tmp_path)
    assert str(caught.value).startswith(str(tmp_path / "broken.py"))


@pytest.mark.parametrize("name", ["SendEmail", "-leading", "a" * 65, "has.dot"])
def test_an_invalid_queue_name_is_a_config_error(tmp_path: Path, name: str) -> None:
    write(tmp_path, f"{name}.py", "def handle(message): ...\n")
    with pytest.raises(ConfigError, match="not a valid queue name"):
        discover_handlers(tmp_path)


def test_handle_may_be_imported_or_assigned(tmp_path: Path) -> None:
    write(tmp_path, "a.py", "from elsewhere import handle\n")
    write(tmp_path, "b.py", "handle = make_handler()\n")
    write(tmp_path, "c.py", "async def handle(message): ...\n")
    assert list(discover_handlers(tmp_path)) == ["a", "b", "c"]


def test_a_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        discover_handlers(tmp_path / "nope")


def test_the_example_handlers_have_distinct_valid_settings() -> None:
    found = discover_handlers(REPO_HANDLERS)
    assert {"send_email", "generate_report"} <= set(found)
    email, report = found["send_email"].settings, found["generate_report"].settings
    for name in ("visibility_timeout", "max_retries", "batch_size", "memory", "timeout"):
        assert getattr(email, name) != getattr(report, name), name
