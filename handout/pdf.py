"""Print the handout HTML to PDF with a headless Chromium.

A real browser renders MathML and print CSS (A4, page breaks) the way students
will see them, so the PDF is the HTML, printed; a page whose contents have page slots is printed twice, the
second time with the page numbers the first printing gave (handout/toc_pages.py). Chromium is found through the
CHROMIUM environment variable or PATH; as root on a Debian/Ubuntu host with
apt-get it is installed once (Debian's `chromium` package) and we say so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from handout.toc_pages import fill_toc_pages, named_destinations, toc_targets

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PRINT_TIMEOUT_S = 120
INSTALL_TIMEOUT_S = 600
# A PDF of the handout is hundreds of KB; anything this small is an error page.
MIN_PDF_BYTES = 5_000
# Printings that fill the contents' page numbers: the numbers take no room, so the second confirms the first.
TOC_PRINTINGS = 3


class PdfError(RuntimeError):
    """The PDF could not be produced; the message says why and what to do."""


def find_chromium() -> str | None:
    """Path of a Chromium-like browser: $CHROMIUM first, then PATH."""
    configured = os.environ.get("CHROMIUM")
    if configured:
        path = shutil.which(configured)
        if path is None:
            raise PdfError(f"CHROMIUM={configured!r} is not an executable")
        return path
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def install_chromium(log=print) -> str | None:
    """Install Debian's chromium when we are root with apt-get; None when we cannot."""
    if os.name != "posix" or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None
    log("handout: no Chromium found; installing Debian's 'chromium' package with apt-get (one time)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        try:
            result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log(f"handout: `{' '.join(command)}` timed out after {INSTALL_TIMEOUT_S} s")
            return None
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            log(f"handout: `{' '.join(command)}` failed: {last[0]}")
            return None
    return find_chromium()


def find_or_install_chromium(log=print) -> str:
    path = find_chromium() or install_chromium(log)
    if path is None:
        raise PdfError(
            "no Chromium found (looked at $CHROMIUM, " + ", ".join(CANDIDATES) + ") and none could be installed "
            "(installing needs root, apt-get and network); set CHROMIUM=/path/to/chrome or install 'chromium'"
        )
    return path


def chromium_command(browser: str, html: Path, pdf: Path, profile_dir: Path) -> list[str]:
    return [
        browser,
        "--headless",
        "--no-sandbox",  # root in containers; the page is our own local file
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile_dir}",  # fresh profile: no locks left by another Chromium
        "--no-pdf-header-footer",
        "--generate-pdf-document-outline",  # bookmarks from the headings
        f"--print-to-pdf={pdf}",
        html.resolve().as_uri(),
    ]


def check_pdf(pdf: Path) -> None:
    if not pdf.is_file():
        raise PdfError(f"Chromium exited without writing {pdf}")
    size = pdf.stat().st_size
    with pdf.open("rb") as handle:
        magic = handle.read(5)
    if magic != b"%PDF-":
        raise PdfError(f"{pdf} is not a PDF (starts with {magic!r})")
    if size < MIN_PDF_BYTES:
        raise PdfError(f"{pdf} is only {size} bytes; the page probably failed to load")


def print_once(browser: str, html: Path, pdf: Path) -> None:
    """One Chromium printing of ``html`` to ``pdf``; PdfError when it fails."""
    pdf.unlink(missing_ok=True)  # a stale PDF must not pass the checks below
    with tempfile.TemporaryDirectory(prefix="handout-chromium-") as profile:
        command = chromium_command(browser, html, pdf.resolve(), Path(profile))
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=PRINT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise PdfError(f"{browser} did not finish printing {html} within {PRINT_TIMEOUT_S} s") from None
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
        raise PdfError(f"{browser} exited with status {result.returncode} printing {html}:\n{tail}")
    check_pdf(pdf)


def html_to_pdf(html: Path, pdf: Path, browser: str | None = None, log=print) -> Path:
    """Print ``html`` to ``pdf``; raise PdfError with the reason when it fails. When the page's contents have
    page slots, print again with the page numbers the printing before gave, until they stay put."""
    browser = browser or find_or_install_chromium(log)
    pdf.parent.mkdir(parents=True, exist_ok=True)
    print_once(browser, html, pdf)
    page = html.read_text(encoding="utf-8")
    targets = set(toc_targets(page))
    if not targets:
        return pdf
    pages = {name: number for name, number in named_destinations(pdf).items() if name in targets}
    if not pages:
        log("handout: no page numbers for the contents (the PDF's named destinations could not be read)")
        return pdf
    with tempfile.TemporaryDirectory(prefix="handout-toc-") as folder:
        numbered = Path(folder) / html.name
        for _ in range(TOC_PRINTINGS - 1):
            numbered.write_text(fill_toc_pages(page, pages), encoding="utf-8")
            print_once(browser, numbered, pdf)
            printed = {name: number for name, number in named_destinations(pdf).items() if name in targets}
            if printed == pages:
                return pdf
            pages = printed
    log("handout: warning: the contents' page numbers kept moving; some may be off by a page")
    return pdf


def count_pages(pdf: Path) -> int:
    """Page objects in the PDF (`/Type /Page`, not `/Pages`); good enough for Chromium's output."""
    import re

    data = pdf.read_bytes()
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", data))


if __name__ == "__main__":  # python -m handout.pdf in.html out.pdf
    html_to_pdf(Path(sys.argv[1]), Path(sys.argv[2]))
