"""Shared fixtures (helpers live in tests/helpers.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from helpers import GOLDEN


@pytest.fixture(scope="session")
def golden() -> Path:
    return GOLDEN


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
