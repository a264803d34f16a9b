"""Every relative link in README.md, docs/*.md and the records' index (docs/results/README.md) leads to a file or
folder of the checkout (and a link into a page's section to a heading of that page), and every docs/ page is listed in
the docs index (docs/README.md). Links to other sites are not followed."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "docs" / "results" / "README.md"]
# a markdown link or image: [text](target) or [text](target "title"); the target up to the first space or ')'
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def without_code(text: str) -> str:
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))


def links(page: Path, anchors: bool = False) -> list[str]:
    """Relative link targets of a page (with their #anchor if `anchors`); code blocks and inline code are not text."""
    targets = [match.group(1) for match in LINK.finditer(without_code(page.read_text()))]
    return [target if anchors else target.split("#")[0] for target in targets
            if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")]


def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_the_link_finder_sees_relative_links_only(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('[a](docs/A.md#part) [b](https://x.org/b.md) [c](#here) ![d](img/d.png "title")\n'
                    "`[e](in/code.md)`\n```\n[f](in/block.md)\n```\n[g](../up.md)\n")
    assert links(page) == ["docs/A.md", "img/d.png", "../up.md"]


def test_the_anchors_are_github_s(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n## A fair comparison: arms (`configs/study/cpu-lr.json`)\n```\n# not a heading\n```\n")
    assert heading_anchors(page) == {"top", "a-fair-comparison-arms-configsstudycpu-lrjson"}


def test_every_section_link_names_a_heading():
    broken = []
    for page in PAGES:
        for target in links(page, anchors=True):
            path, _, anchor = target.partition("#")
            if anchor and path.endswith(".md") and (page.parent / path).is_file():
                if anchor not in heading_anchors(page.parent / path):
                    broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in links(page):
            if not (page.parent / target).resolve().exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


# the pages whose text this project's docs own, and the paths they name inside transformers' sdist, not this checkout
PATH_CHECKED = ["README.md", "docs/README.md", "docs/PYTHON.md", "docs/ARCHITECTURE.md", "docs/TRAINING.md",
                "docs/EVALUATION.md", "docs/STUDY.md", "docs/CONVERSION.md", "docs/PUBLISHING.md", "docs/FAMILIES.md",
                "docs/TESTING.md", "docs/SERVING.md", "docs/K3.md", "docs/PERFORMANCE.md", "docs/SAFETY.md",
                "docs/results/README.md"]
TRANSFORMERS_SDIST = {"tests/test_modeling_common.py", "tests/generation/", "tests/exporters/"}


def named_paths(text: str) -> list[str]:
    """Checkout paths a page names in inline code (`hf_attnres/...`, `tests/...`, ...), placeholders and globs left
    out."""
    found = re.findall(r"`((?:hf_attnres|tests|scripts|configs|examples|eval|docs)/[^`\s]*)`", text)
    return [path.split("::")[0] for path in found if not any(c in path for c in "<*{")]


def test_named_paths_are_read_from_inline_code():
    text = "`hf_attnres/core/model.py` `tests/x.py::test_y` `hf_attnres/families/<f>/` `ls hf_attnres/`"
    assert named_paths(text) == [
        "hf_attnres/core/model.py", "tests/x.py"]


@pytest.mark.parametrize("page", PATH_CHECKED)
def test_every_path_a_page_names_exists(page):
    missing = [path for path in named_paths((REPO / page).read_text())
               if path not in TRANSFORMERS_SDIST and not (REPO / path).exists()]
    assert missing == []


def test_every_docs_page_is_in_the_index():
    index = set(links(REPO / "docs" / "README.md"))
    unlisted = [page.name for page in PAGES if page.parent == REPO / "docs" and page.name != "README.md"
                and page.name not in index]
    assert unlisted == []
