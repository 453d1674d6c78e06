"""The corpus' text and how it is cleaned: documents, paragraphs, words, and the test of what reads as prose.

Small pure functions, unit-tested on made-up text: whitespace normalised so that a paragraph is one line, the
words the English-word test counts, the prose test every paragraph must pass, paragraphs out of plain text and
HTML, and the removal of paragraphs already seen. ``DOC_SEPARATOR`` is the one format of ``train.txt`` and
``val.txt``, which the training run reads back (train_data.py).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser

DOC_SEPARATOR = "\n\n\f\n"  # between documents; a paragraph never contains a form feed
WORD_RE = re.compile(r"[a-z]+(?:'[a-z]+)*")


class CorpusError(RuntimeError):
    """A step of the build failed; the message names the package and what to do."""


@dataclass
class Document:
    """One unit of the validation split: a chapter, a web page, a glossary letter."""

    name: str
    paragraphs: list[str]


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


def render(documents: Iterable[Document]) -> str:
    """Documents as ``train.txt`` holds them: paragraphs between blank lines, DOC_SEPARATOR between documents."""
    return DOC_SEPARATOR.join("\n\n".join(doc.paragraphs) for doc in documents) + "\n"
