"""The README's test command and CI agree on the browser tests: where Debian's Chromium is
missing they skip with one reason, and that reason is the README's one line saying how to
install it (`.ci/run` installs the same package)."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import CHROMIUM_MISSING

ROOT = Path(__file__).resolve().parents[1]
INSTALL = "apt-get install -y chromium"


def test_the_skip_reason_is_the_readmes_line():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert INSTALL in CHROMIUM_MISSING
    line = re.search(r"`apt-get install -y ([^`]+)`", readme)
    assert line and "chromium" in line.group(1).split(), "the README must say how to get Chromium"
    assert "chromium" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_every_browser_test_uses_the_one_reason():
    users = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        text = path.read_text(encoding="utf-8")
        if ".chromium.launch(" in text:
            # require_chromium itself, or the chromium_path fixture that calls it
            assert "require_chromium" in text or "chromium_path" in text, (
                f"{path.name} launches Chromium without require_chromium")
            assert "pytest.skip(" not in text or "chromium" not in text.split("pytest.skip(", 1)[1][:200]
            users.append(path.name)
    assert len(users) >= 4, users  # the listening game, the report, its datasets, counterfactuals
