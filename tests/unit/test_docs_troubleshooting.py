"""docs/troubleshooting.md quotes only messages the tools print: each bold-quoted message (``**`...`**``) occurs,
as written, in a test that checks a command's or the library's output (the files in ``CHECKED``) or, for the
health warnings, in ``runs/health.py`` where they are worded; a reworded message fails here until the page follows.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"
CHECKED = ["test_bad_inputs.py", "test_weight_loading.py", "test_health_cli.py", "test_health.py",
           "test_faithfulness_health.py", "test_mib_models.py"]


def _unescaped(text: str) -> str:
    return text.replace("\\(", "(").replace("\\)", ")").replace("\\.", ".").replace('\\"', '"')


def test_every_quoted_message_is_one_a_test_checks():
    quoted = re.findall(r"\*\*`([^`]+)`\*\*", PAGE.read_text(encoding="utf-8"))
    assert len(quoted) >= 15
    tests = _unescaped("\n".join((ROOT / "tests" / "unit" / name).read_text(encoding="utf-8") for name in CHECKED))
    health = (ROOT / "src" / "subnetlab" / "runs" / "health.py").read_text(encoding="utf-8")
    missing = [q for q in quoted if q not in tests and q not in health]
    assert not missing, f"quoted on the page but checked by no test: {missing}"
