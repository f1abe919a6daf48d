"""The test suite carries its own data: nothing it reads lives outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import FIXTURES_DIR, REPO_ROOT, fixture_files

# A path that climbs out of the checkout, or names a sibling folder of it.
_OUTSIDE = re.compile(r"\.\./shared|parent\s*/\s*[\"']shared[\"']|THE_LOOP_FIXTURES_DIR")


def test_fixture_folder_is_inside_the_repository() -> None:
    root = REPO_ROOT.resolve()
    assert FIXTURES_DIR.resolve().is_relative_to(root)
    files = fixture_files()
    assert len(files) > 90  # the whole sample set, both hosts
    for _event, path in files:
        assert path.resolve().is_relative_to(root), path


def test_fixtures_carry_their_licence_and_source() -> None:
    assert "MIT License" in (FIXTURES_DIR / "LICENSE").read_text()
    readme = (FIXTURES_DIR / "README.md").read_text()
    assert re.search(r"\b[0-9a-f]{40}\b", readme), "README names the source commit"


def test_no_test_or_build_file_reads_outside_the_repository() -> None:
    offenders = []
    candidates = [*REPO_ROOT.glob("tests/**/*.py"), *REPO_ROOT.glob("benchmarks/*.py")]
    candidates += [REPO_ROOT / "Makefile", REPO_ROOT / ".ci" / "run", *REPO_ROOT.glob("scripts/*")]
    this = Path(__file__).resolve()
    for path in candidates:
        if path.resolve() == this or not path.is_file():
            continue
        if _OUTSIDE.search(path.read_text(errors="replace")):
            offenders.append(str(path.relative_to(REPO_ROOT)))
    assert offenders == []
