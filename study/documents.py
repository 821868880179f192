"""Files of an extracted package tree -> text documents, one per file, deterministically.

`file_text(path, data)` turns one file's bytes into text, or None when the file is not a
document: plain text, rst and other text files are kept as they are, `.gz` files (man and
info pages) are decompressed first, HTML is turned into text by `html_text`, and binaries
(bytes that are not UTF-8 or hold NULs), images, fonts, scripts and style sheets are skipped.
`tree_documents` walks a tree in sorted path order, applies a package's include/exclude
globs, drops tiny and oversized documents and duplicates (by the sha256 of the text, across
every tree that shares one `seen` set) and yields `(relative path, text)`.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import re
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser
from pathlib import Path

MIN_CHARS = 200
MAX_BYTES = 4 * 2**20
SKIP_SUFFIXES = (
    ".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico", ".bmp", ".webp", ".pdf", ".ps", ".eps", ".dvi",
    ".woff", ".woff2", ".ttf", ".otf", ".eot", ".js", ".css", ".map", ".json", ".inv", ".zip", ".xz",
    ".bz2", ".tar", ".mo", ".pyc", ".o", ".so", ".a", ".epub", ".doctree", ".pickle",
)
HTML_SUFFIXES = (".html", ".htm", ".xhtml")
# Elements whose whole content is dropped: code run by the browser, styling and navigation.
DROP_TAGS = {"script", "style", "nav", "head", "noscript", "svg", "button", "form", "footer", "template"}
DROP_CLASSES = {"sphinxsidebar", "related", "sidebar", "navigation", "navbar", "breadcrumb", "breadcrumbs",
                "headerlink", "footer", "toc-sidebar", "sub-nav", "tocset", "navsettop", "navsetbottom",
                "navheader", "navfooter"}
BLOCK_TAGS = {"p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6",
              "pre", "table", "tr", "blockquote", "section", "article", "hr", "main", "figure", "caption"}
VOID_TAGS = {"br", "hr", "img", "meta", "link", "input", "wbr", "area", "base", "col", "embed", "source",
             "track", "param"}


class _TextParser(HTMLParser):
    """Collects the visible text of a page; see `html_text`."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._drop: tuple[str, int] | None = None  # (tag, nesting depth) of the element being dropped
        self._pre = 0

    def _dropped(self, tag: str, attrs) -> bool:
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        return tag in DROP_TAGS or attrs.get("role") == "navigation" or bool(classes & DROP_CLASSES)

    def handle_starttag(self, tag, attrs):
        if tag in VOID_TAGS:
            if self._drop is None and tag in BLOCK_TAGS:
                self.parts.append("\n")
            return
        if self._drop is not None:
            if tag == self._drop[0]:
                self._drop = (tag, self._drop[1] + 1)
            return
        if self._dropped(tag, attrs):
            self._drop = (tag, 1)
            return
        if tag == "pre":
            self._pre += 1
        if tag in BLOCK_TAGS:
            self.parts.append("\n\n" if tag in ("p", "pre", "h1", "h2", "h3", "h4", "h5", "h6") else "\n")
        elif tag in ("td", "th"):
            self.parts.append(" ")

    def handle_endtag(self, tag):
        if self._drop is not None:
            if tag == self._drop[0]:
                depth = self._drop[1] - 1
                self._drop = None if depth == 0 else (tag, depth)
            return
        if tag == "pre":
            self._pre = max(0, self._pre - 1)
        if tag in BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data):
        if self._drop is None:
            self.parts.append(data if self._pre else re.sub(r"\s+", " ", data))


def html_text(html: str) -> str:
    """The visible text of an HTML page: script, style, head and navigation dropped, blocks on their own lines."""
    parser = _TextParser()
    parser.feed(html)
    parser.close()
    lines = [line.rstrip() for line in "".join(parser.parts).split("\n")]
    text = "\n".join(line if line.strip() else "" for line in lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def file_text(name: str, data: bytes) -> str | None:
    """The document text of a file called `name` holding `data`, or None when it is not a text document."""
    lower = name.lower()
    if lower.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            return None
        lower = lower[:-3]
    if lower.endswith(SKIP_SUFFIXES) or b"\0" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    text = text.replace("\r\n", "\n")
    return html_text(text) if lower.endswith(HTML_SUFFIXES) else text


def matches(path: str, patterns: Sequence[str]) -> bool:
    """Whether the relative posix `path` matches one of the fnmatch `patterns` (`*` also crosses `/`)."""
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tree_documents(root: Path, *, include: Sequence[str] = ("*",), exclude: Sequence[str] = (),
                   seen: set[str], counts: dict[str, int] | None = None) -> Iterator[tuple[str, str]]:
    """(path relative to `root`, text) of each document file under `root`, in sorted path order.

    A file is taken when it matches `include` and not `exclude`, converts to text (`file_text`),
    holds at least MIN_CHARS non-blank characters after conversion, is at most MAX_BYTES large,
    and its text's hash is not yet in `seen` (which is updated). `counts`, when given, gets the
    number of files skipped per reason ("excluded", "not_text", "tiny", "too_large", "duplicate").
    """
    counts = {} if counts is None else counts
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    for file in files:
        rel = file.relative_to(root).as_posix()
        if not matches(rel, include) or matches(rel, exclude):
            reason = "excluded"
        elif file.stat().st_size > MAX_BYTES:
            reason = "too_large"
        else:
            text = file_text(file.name, file.read_bytes())
            if text is None:
                reason = "not_text"
            elif len(text.strip()) < MIN_CHARS:
                reason = "tiny"
            elif len(text.encode("utf-8")) > MAX_BYTES:
                reason = "too_large"
            elif text_hash(text) in seen:
                reason = "duplicate"
            else:
                seen.add(text_hash(text))
                yield rel, text
                continue
        counts[reason] = counts.get(reason, 0) + 1
