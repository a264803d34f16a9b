"""Every extra pyproject asks of a dependency is one that dependency provides, spelled as its metadata spells it, and
so is every extra that extra asks of its own dependencies in turn. pip (23.x) compares extras as written: an extra
the package lacks is a warning on every install (`math-verify 0.9.0 does not provide the extra 'antlr4_11_0'`) and
installs nothing. Checked against the installed distributions (one not installed is skipped)."""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
import tomllib  # the tests run on Python 3.11+
from packaging.requirements import Requirement

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
OWN_EXTRAS = set(PYPROJECT["optional-dependencies"])
REQUIREMENTS = sorted({line for lines in [PYPROJECT["dependencies"], *PYPROJECT["optional-dependencies"].values()]
                       for line in lines if "[" in line})


def missing_extras(line: str) -> list[str]:
    """'package[extra]' for each extra `line` asks that the installed package does not provide, followed one level
    into the requirements those extras add; raises PackageNotFoundError when the package is not installed."""
    requirement = Requirement(line)
    if requirement.name == "hf-attnres":
        return [f"hf-attnres[{extra}]" for extra in sorted(requirement.extras - OWN_EXTRAS)]
    distribution = importlib.metadata.distribution(requirement.name)
    provided = set(distribution.metadata.get_all("Provides-Extra") or [])
    missing = [f"{requirement.name}[{extra}]" for extra in sorted(requirement.extras - provided)]
    for extra in sorted(requirement.extras & provided):
        for needed in map(Requirement, distribution.requires or []):
            if needed.extras and needed.marker is not None and needed.marker.evaluate({"extra": extra}):
                try:
                    missing += missing_extras(str(needed).split(";")[0])
                except importlib.metadata.PackageNotFoundError:
                    continue
    return missing


@pytest.mark.parametrize("line", REQUIREMENTS)
def test_every_extra_asked_for_is_provided(line):
    try:
        assert missing_extras(line) == [], line
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{Requirement(line).name} is not installed")


def test_the_check_sees_an_extra_spelled_otherwise():
    """The spellings the [eval] extra had and could have had: math-verify 0.9.0 provides `antlr4-11-0` (not
    `antlr4_11_0`), and that one asks latex2sympy2_extended for `antlr4_11_0`, which it spells `antlr4-11-0`."""
    try:
        version = importlib.metadata.version("math-verify")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("math-verify is not installed (the [eval] extra)")
    if version != "0.9.0":
        pytest.skip(f"the spellings are math-verify 0.9.0's; {version} is installed")
    assert missing_extras("math-verify[antlr4_11_0]") == ["math-verify[antlr4_11_0]"]
    assert missing_extras("math-verify[antlr4-11-0]") == ["latex2sympy2_extended[antlr4_11_0]"]
    assert missing_extras("hf-attnres[eval,nothing]") == ["hf-attnres[nothing]"]
