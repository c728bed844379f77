"""CDK fixtures: each stack variant is synthesized once per session (cdk-nag runs each time)."""

from __future__ import annotations

import pytest
from cdk_support import VARIANT_CONTEXT, Synth, synth


@pytest.fixture(scope="session")
def default() -> Synth:
    """The stack `make synth` builds: cdk.json's defaults, the repository's handlers."""
    return synth()


@pytest.fixture(scope="session")
def variant() -> Synth:
    """Every option switched away from its default, and a producer granted `send_email`."""
    return synth(VARIANT_CONTEXT, producer_queue="send_email")
