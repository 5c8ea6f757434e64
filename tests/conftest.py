import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def python():
    """The interpreter the tests run under; its bin/ holds srl-launch and srl-trace."""
    return sys.executable


def script(name: str) -> str:
    return str(Path(sys.executable).parent / name)
