"""Page numbers in the PDF's table of contents, from a first printing.

Chromium's print engine does not implement CSS ``target-counter()``, so the contents cannot ask for the page
an anchor lands on. It does write a named destination (the page and position) for every element that an
internal link points to. So the handout is printed twice: the first PDF says on which page each contents
entry's target starts (``named_destinations``), those numbers are written into the contents
(``fill_toc_pages``), and the second printing is the handout. The numbers take no more room than the
empty slots they fill, so the pages do not move between the two printings (``handout.pdf`` checks it).

The reader below handles what Chromium's PDF backend (Skia) writes: a classic cross-reference table,
plain (uncompressed) dictionaries for the catalog, the page tree and the ``/Dests`` dictionary. Anything
else gives an empty map, and the contents keep their empty page slots.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

_STARTXREF = re.compile(rb"startxref\s+(\d+)\s+%%EOF\s*$")
_XREF_ENTRY = re.compile(rb"(\d{10}) (\d{5}) ([nf])")
_REF = re.compile(rb"(\d+)\s+0\s+R")
_NAME_ESCAPE = re.compile(r"#([0-9A-Fa-f]{2})")
# The slot the template leaves for a page number: <span class="toc-page" data-target="t4"></span>
_SLOT = re.compile(r'(<span class="toc-page" data-target="([^"]+)">)(</span>)')


class PdfStructureError(ValueError):
    """The PDF is not laid out as the reader expects."""


class _Pdf:
    def __init__(self, data: bytes):
        self.data = data
        self.offsets = self._xref()

    def _xref(self) -> dict[int, int]:
        tail = _STARTXREF.search(self.data[-64:])
        if not tail:
            raise PdfStructureError("no startxref at the end")
        at = int(tail.group(1))
        if not self.data.startswith(b"xref", at):
            raise PdfStructureError("the cross-reference is a stream, not a table")
        offsets: dict[int, int] = {}
        lines = self.data[at : self.data.index(b"trailer", at)].split(b"\n")[1:]
        number = 0
        for line in lines:
            parts = line.split()
            if len(parts) == 2:  # a subsection header: first object number, count
                number = int(parts[0])
            elif len(parts) == 3 and _XREF_ENTRY.match(line.strip()):
                if parts[2] == b"n":
                    offsets[number] = int(parts[0])
                number += 1
        return offsets

    def object(self, number: int) -> bytes:
        """The body of a dictionary object, up to its ``endobj`` (or the start of its stream)."""
        start = self.offsets.get(number)
        if start is None:
            raise PdfStructureError(f"object {number} is not in the cross-reference table")
        end = self.data.index(b"endobj", start)
        body = self.data[start:end]
        stream = body.find(b"stream")
        return body if stream < 0 else body[:stream]

    def ref(self, body: bytes, key: bytes) -> int | None:
        found = re.search(rb"/" + key + rb"\s+(\d+)\s+0\s+R", body)
        return int(found.group(1)) if found else None

    def catalog(self) -> bytes:
        trailer = self.data[self.data.rindex(b"trailer") :]
        root = self.ref(trailer, b"Root")
        if root is None:
            raise PdfStructureError("the trailer names no /Root")
        return self.object(root)

    def pages(self, node: int) -> list[int]:
        """Page object numbers in reading order, walking the page tree from ``node``."""
        body = self.object(node)
        if re.search(rb"/Type\s*/Pages\b", body):
            kids = re.search(rb"/Kids\s*\[(.*?)\]", body, re.DOTALL)
            if not kids:
                raise PdfStructureError(f"page tree node {node} has no /Kids")
            return [page for kid in _REF.findall(kids.group(1)) for page in self.pages(int(kid))]
        return [node]


def _name(raw: bytes) -> str:
    return _NAME_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), raw.decode("latin-1"))


def named_destinations(pdf: Path) -> dict[str, int]:
    """Anchor name -> 1-based page number, for every named destination of a Chromium-printed PDF; {} when the
    PDF is not structured as expected."""
    try:
        document = _Pdf(pdf.read_bytes())
        catalog = document.catalog()
        pages_root, dests = document.ref(catalog, b"Pages"), document.ref(catalog, b"Dests")
        if pages_root is None or dests is None:
            return {}
        page_of = {number: index for index, number in enumerate(document.pages(pages_root), start=1)}
        found = {}
        for name, page in re.findall(rb"/([^\s/\[\]<>()]+)\s*\[\s*(\d+)\s+0\s+R", document.object(dests)):
            if int(page) in page_of:
                found[_name(name)] = page_of[int(page)]
        return found
    except (PdfStructureError, ValueError, OSError):
        return {}


def toc_targets(page_html: str) -> list[str]:
    """The anchors the contents have a page slot for, in order."""
    return [html.unescape(target) for _, target, _ in _SLOT.findall(page_html)]


def fill_toc_pages(page_html: str, pages: dict[str, int]) -> str:
    """The page with each contents slot holding its target's page number (slots of unknown targets stay empty)."""

    def fill(match: re.Match) -> str:
        page = pages.get(html.unescape(match.group(2)))
        return match.group(1) + (str(page) if page is not None else "") + match.group(3)

    return _SLOT.sub(fill, page_html)
