"""Prose available on any machine: paragraphs of the standard library's docstrings, the interactive help topics
and the Python licence, grouped into documents (the source text of the demo corpus)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType

MIN_DOCUMENT_CHARS = 200
MAX_DOCUMENT_CHARS = 1500

SOURCE_MODULES: tuple[str, ...] = (
    "abc",
    "argparse",
    "ast",
    "asyncio",
    "base64",
    "bisect",
    "builtins",
    "bz2",
    "calendar",
    "cmath",
    "codecs",
    "collections",
    "concurrent.futures",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "dis",
    "doctest",
    "email.message",
    "email.utils",
    "enum",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "gettext",
    "glob",
    "graphlib",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html.parser",
    "http.client",
    "http.server",
    "imaplib",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "math",
    "mimetypes",
    "multiprocessing.pool",
    "numbers",
    "operator",
    "optparse",
    "os",
    "pathlib",
    "pdb",
    "pickle",
    "poplib",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "selectors",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "sys",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "traceback",
    "typing",
    "unittest",
    "urllib.parse",
    "urllib.request",
    "uuid",
    "warnings",
    "weakref",
    "xml.dom.minidom",
    "xml.etree.ElementTree",
    "zipfile",
    "zoneinfo",
)

_CODE_CHARS = frozenset("{}[]()=<>_*|\\#@$%^~`")


def source_documents() -> list[str]:
    """Return de-duplicated prose documents from docstrings, help topics and the licence, collected in a fresh
    interpreter that loads the standard library only (`python -I -S`): packages imported or started in this process
    (transformers, ray, pytest plugins) patch standard modules and classes, and would change the corpus. This file
    runs there as a script, so it imports memrisk only here."""
    from memrisk.errors import MemriskError

    try:
        collected = subprocess.run([sys.executable, "-I", "-S", __file__], capture_output=True, check=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MemriskError(f"cannot collect the demo's source text in a fresh Python process: {exc}") from None
    return json.loads(collected.stdout)


def _collect_documents() -> list[str]:
    """The documents of `source_documents`, from the modules as this process has them."""
    raw = [doc for name in SOURCE_MODULES for doc in _module_docstrings(name)]
    raw += _help_topics() + _license_texts()
    seen: set[str] = set()
    unique = []
    for text in raw:
        for doc in _group_paragraphs(_prose_paragraphs(text)):
            key = normalise(doc)
            if len(doc) >= MIN_DOCUMENT_CHARS and key not in seen:
                seen.add(key)
                unique.append(doc)
    return unique


def _import_quietly(name: str) -> ModuleType | None:
    """Import a module by name, returning None if it is unavailable."""
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _module_docstrings(name: str) -> list[str]:
    """Return docstrings of a module and of the classes, functions and methods it defines."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = _import_quietly(name)
        return [] if module is None else list(_walk_docstrings(module))


def _walk_docstrings(module: ModuleType) -> Iterator[str]:
    """Yield the module docstring, then those of its own members and their attributes."""
    yield module.__doc__ or ""
    for _, member in sorted(vars(module).items()):
        if getattr(member, "__module__", None) != module.__name__ or not _has_own_doc(member):
            continue
        yield member.__doc__
        if inspect.isclass(member):
            attributes = (attribute for _, attribute in sorted(vars(member).items()))
            yield from (attribute.__doc__ for attribute in attributes if _has_own_doc(attribute))


def _has_own_doc(obj: object) -> bool:
    """Tell whether ``obj`` is a class, routine or descriptor carrying its own docstring."""
    documented = isinstance(getattr(obj, "__doc__", None), str)
    descriptor = isinstance(obj, (property, classmethod, staticmethod))
    return documented and (inspect.isclass(obj) or inspect.isroutine(obj) or descriptor)


def _help_topics() -> list[str]:
    """Return the texts of the interactive help topics (language reference), if installed."""
    topics = _import_quietly("pydoc_data.topics")
    return [] if topics is None else [text for _, text in sorted(topics.topics.items())]


def _license_texts() -> list[str]:
    """Return the Python licence text as a one-element list, or an empty list if not found."""
    here = os.path.dirname(os.__file__)
    for directory in (os.path.join(here, os.pardir), here):
        for filename in ("LICENSE.txt", "LICENSE"):
            path = os.path.join(directory, filename)
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as handle:
                    return [handle.read()]
    return []


def _prose_paragraphs(text: str) -> list[str]:
    """Split text into whitespace-normalised prose paragraphs, dropping any block with code."""
    paragraphs = []
    for block in re.split(r"\n[ \t]*\n", inspect.cleandoc(text)):
        paragraph = " ".join(block.split())
        if block[:1].isspace() or not all(map(_is_prose_line, block.splitlines())):
            continue
        if _looks_like_prose(paragraph):
            paragraphs.append(paragraph)
    return paragraphs


def _is_prose_line(line: str) -> bool:
    """Tell whether a line is prose rather than a doctest, directive or symbol-heavy code."""
    stripped = line.strip()
    if stripped.startswith((">>>", "...", "$ ", "::")) or stripped.endswith("::"):
        return False
    return sum(char in _CODE_CHARS for char in stripped) <= 0.1 * len(stripped)


def _looks_like_prose(paragraph: str) -> bool:
    """Tell whether a paragraph is a sentence-like run of mostly alphabetic words."""
    if len(paragraph) < 40 or len(paragraph.split()) < 6:
        return False
    letters = sum(char.isalpha() or char.isspace() for char in paragraph)
    return letters >= 0.85 * len(paragraph)


def _group_paragraphs(paragraphs: list[str]) -> list[str]:
    """Join consecutive paragraphs into documents of at most MAX_DOCUMENT_CHARS where possible."""
    documents: list[str] = []
    current: list[str] = []
    for paragraph in paragraphs:
        if current and len("\n".join([*current, paragraph])) > MAX_DOCUMENT_CHARS:
            documents.append("\n".join(current))
            current = []
        current.append(paragraph)
    if current:
        documents.append("\n".join(current))
    return documents


def normalise(text: str) -> str:
    """Return a lower-cased, punctuation-free form of text for duplicate detection."""
    return " ".join(re.findall(r"\w+", text.lower()))


if __name__ == "__main__":
    json.dump(_collect_documents(), sys.stdout)
