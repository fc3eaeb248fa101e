import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "triton"
sys.path.insert(0, str(EXAMPLES))
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _fresh_kernel_cache():
    from compiler.triton import clear_cache

    clear_cache()
    yield
