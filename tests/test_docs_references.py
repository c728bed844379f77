"""What the handler folder's README and the deployment guide name exists."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from s3queue import Message

REPO = Path(__file__).resolve().parents[1]
LAYER = REPO / "layers" / "s3queue" / "python"
PATH = re.compile(r"`([\w./-]+/[\w.-]+\.(?:py|md|txt|json))`")


def test_the_handlers_readme_names_every_field_of_a_message() -> None:
    text = (REPO / "functions" / "handlers" / "README.md").read_text()
    fields = {f.name for f in dataclasses.fields(Message) if f.name != "opener"} | {"open()"}
    assert not [name for name in sorted(fields) if f"`{name}`" not in text]


def test_every_file_the_deployment_guide_names_exists() -> None:
    text = (REPO / "docs" / "deployment.md").read_text()
    named = PATH.findall(text)
    assert "tests/cdk/test_rehearsal.py" in named
    named = [p for p in named if not p.startswith("cdk.out/")]  # what `make synth` writes
    missing = [p for p in named if not (REPO / p).exists() and not (LAYER / p).exists()]
    assert missing == []
