"""subword-nmt BPE as a vocabulary backend (structnmt.data.subword_nmt, `prepare --subword subword-nmt`):
the merges and pieces are subword-nmt's own, the inventory is fairseq's, and every command that reads a
vocabulary (prepare with a parser, training, translation, checkpoints) reads it alike."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_user_error, cli
from test_bad_inputs import write_config
from test_prepare import _corpus, _punctuated, _run, _sentences, _tiny_model

from structnmt.data.dataset import PreparedDataset
from structnmt.data.prepare import PrepareConfig
from structnmt.data.subword_nmt import SubwordNmtModel, learn_codes, word_counts
from structnmt.data.vocab import Vocab, VocabError, train_subword_nmt

# Sennrich et al. (2016)'s example, a few times over, and words that share its pieces
TEXT = ["low low lower lowest", "newest newest widest", "newer wider lowest"] * 4 + ["slow newly"]


def _reference_codes(lines: list[str], merges: int) -> str:
    """subword-nmt's learn_bpe run on the text itself (not on our token counts)."""
    from subword_nmt.learn_bpe import learn_bpe

    text = io.StringIO("".join(line + "\n" for line in lines))
    text.name = "train.txt"
    out = io.StringIO()
    learn_bpe(text, out, merges)
    return out.getvalue()


def test_codes_and_pieces_are_subword_nmts_own():
    from subword_nmt.apply_bpe import BPE

    codes, learned = learn_codes(word_counts(TEXT), 12)
    assert codes == _reference_codes(TEXT, 12) and learned == 12
    model, counts = SubwordNmtModel.build(codes, word_counts(TEXT))
    bpe = BPE(io.StringIO(codes))
    for line in TEXT + ["lowly newest wide"]:
        assert model.segment(line) == bpe.process_line(line).split()
    # the inventory: the four specials, then every piece of the BPE'd training text, most frequent first
    expect = Counter(p for line in TEXT for p in bpe.process_line(line).split())
    assert model.pieces[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert counts == expect and set(model.pieces[4:]) == set(expect)
    assert [counts[p] for p in model.pieces[4:]] == sorted(expect.values(), reverse=True)
    # "@@" marks a piece its word continues: "low@@" and "low" are two pieces, as in a fairseq dictionary
    pieces = model.segment("lowest lower low")
    assert "".join(pieces).replace("@@", "") == "lowestlowerlow"
    assert any(p.endswith("@@") for p in pieces) and pieces[-1] == "low"


def test_fewer_merges_when_no_pair_repeats_and_none_without_pairs():
    codes, learned = learn_codes(word_counts(["ab cd"]), 100)
    assert learned == 0 and codes.startswith("#version")
    codes, learned = learn_codes(word_counts(["a b c", "b"]), 10)  # single characters only: no pair at all
    assert learned == 0
    model, _ = SubwordNmtModel.build(codes, word_counts(["a b c"]))
    assert model.encode("a b z") == [model.piece_to_id("a"), model.piece_to_id("b"), 1]  # unseen: <unk>


def test_encode_decode_spans_and_words(tmp_path):
    vocab, learned = train_subword_nmt(TEXT, tmp_path / "bpe", merges=12)
    assert learned == 12 and len(vocab) == len(vocab.bpe.pieces)
    line = "newest  lowest widest"
    ids = vocab.encode([line])[0]
    assert 1 not in ids  # every piece of a training word is in the inventory
    assert vocab.decode(ids + [3, 7]) == "newest lowest widest"  # "@@ " removed, stops at EOS
    raw = [vocab.sp.id_to_piece(i) for i in ids]
    # the word-finding code's convention: "▁" on each word's first piece, no separator
    marked = vocab.pieces(ids)
    assert [p.startswith("▁") for p in marked] == [i == 0 or raw[i - 1][-2:] != "@@" for i in range(len(raw))]
    assert "".join(marked).replace("▁", " ").strip() == "newest lowest widest"
    wop = vocab.word_of_piece(ids).tolist()
    assert wop == (np.cumsum([p.startswith("▁") for p in marked]) - 1).tolist() and wop[0] == 0 and wop[-1] == 2
    assert vocab.encode_pieces([line])[0] == marked
    # byte offsets into the text as given (two spaces included), as SentencePiece gives them
    spans = vocab.encode_spans([line])[0]
    assert [i for i, _, _ in spans] == ids
    assert "".join(line[b:e] for _, b, e in spans) == line.replace(" ", "")
    assert spans[0][1] == 0 and spans[-1][2] == len(line)
    assert all(line[b:e] == p.removesuffix("@@") for (_, b, e), p in zip(spans, raw))


@pytest.mark.parametrize("line", ["über die  Straße .", "see @@ here x@@ now", "naïve\tcafé"])
def test_spans_are_utf8_byte_offsets_covering_every_character(tmp_path, line):
    from structnmt.syntax.align import piece_char_spans

    vocab, _ = train_subword_nmt(["über die Straße .", "die Straße über die Brücke", "naïve café", "see x now"] * 3,
                                 tmp_path / "bpe", merges=25)
    spans = vocab.encode_spans([line])[0]
    data = line.encode("utf-8")
    assert "".join(data[b:e].decode("utf-8") for _, b, e in spans) == "".join(line.split())
    chars = piece_char_spans(line, [(b, e) for _, b, e in spans])
    assert all(e > b for b, e in chars)  # no piece without a character, "@@" ending a word included
    assert "".join(line[b:e] for b, e in chars) == "".join(line.split())


def test_a_literal_special_in_the_text_reads_as_unk(tmp_path):
    vocab, _ = train_subword_nmt(["a <s> b </s> c <pad> d", "x </s> y <pad>"] * 10, tmp_path / "bpe", merges=50)
    ids = vocab.encode(["a <s> b </s> c <pad> d"])[0]
    assert ids[1::2] == [1, 1, 1] and 0 not in ids and 2 not in ids and 3 not in ids
    assert vocab.decode(ids) == "a <unk> b <unk> c <unk> d"


@pytest.mark.parametrize("content", [b"", b"structnmt subword-nmt 1\n{\"codes\": 1}", b"\x00\x01garbage"])
def test_an_empty_or_damaged_model_file_is_a_vocab_error(tmp_path, content):
    (tmp_path / "x.model").write_bytes(content)
    with pytest.raises(VocabError, match=r"x\.model: not a readable SentencePiece or subword-nmt model"):
        Vocab(tmp_path / "x.model")


def test_the_files_travel_and_identify_the_model(tmp_path):
    from subword_nmt.apply_bpe import BPE

    vocab, _ = train_subword_nmt(TEXT, tmp_path / "bpe", merges=12)
    codes = (tmp_path / "bpe.codes").read_text(encoding="utf-8")
    assert codes == vocab.bpe.codes  # subword-nmt's own codes file: `subword-nmt apply-bpe -c bpe.codes`
    assert BPE(io.StringIO(codes)).process_line("lowest") == " ".join(vocab.bpe.segment("lowest"))
    listing = (tmp_path / "bpe.vocab").read_text(encoding="utf-8").splitlines()
    assert [ln.split(" ")[0] for ln in listing] == vocab.bpe.pieces[4:]  # fairseq's dict.txt format
    again = Vocab(proto=vocab.proto)
    assert again.sha256 == vocab.sha256 and again.bpe.pieces == vocab.bpe.pieces
    other, _ = train_subword_nmt(TEXT, tmp_path / "other", merges=11)
    assert other.sha256 != vocab.sha256
    (tmp_path / "cut.model").write_bytes(vocab.proto[:40])
    with pytest.raises(VocabError, match=r"cut\.model: not a readable SentencePiece or subword-nmt model"):
        Vocab(tmp_path / "cut.model")


# ---------------------------------------------------------------------------- prepare, train, translate


@pytest.fixture(scope="module")
def bpe_data(tmp_path_factory):
    """A punctuated corpus prepared as fairseq's Multi30k recipe: Moses, lowercased, joint subword-nmt BPE."""
    root = tmp_path_factory.mktemp("bpe")
    src, tgt = _punctuated(250, 41), _punctuated(250, 42)
    vsrc, vtgt = _punctuated(20, 43), _punctuated(20, 44)
    cfg = PrepareConfig(source_lang="en", target_lang="de", trainpref=_corpus(root, "train", src, tgt),
                        validpref=_corpus(root, "valid", vsrc, vtgt), lowercase=True, moses=True,
                        subword="subword-nmt", merges=60)
    manifest, log = _run(cfg, root / "data")
    return {"out": root / "data", "manifest": manifest, "log": log, "train": (src, tgt)}


def test_prepare_writes_a_subword_nmt_dataset(bpe_data):
    from subword_nmt.apply_bpe import BPE

    from structnmt.data.moses import moses_pretokenize

    out, m = bpe_data["out"], bpe_data["manifest"]
    assert {"bpe.model", "bpe.codes", "bpe.vocab"} <= set(m["files"]) and "spm.model" not in m["files"]
    assert m["vocab"]["src"]["file"] == "bpe.model" and m["config"]["subword"] == "subword-nmt"
    ds = PreparedDataset(out)
    assert ds.src_vocab.bpe is not None and ds.src_vocab.proto == ds.tgt_vocab.proto
    src, tgt = bpe_data["train"]
    train = ds.split("train")
    # the ids are subword-nmt's pieces of the Moses-tokenized, lowercased text, as its own apply-bpe gives them
    bpe = BPE(io.StringIO((out / "bpe.codes").read_text(encoding="utf-8")))
    for i in (0, 7):
        tokenized = moses_pretokenize(tgt[i], "de").lower()
        assert [ds.tgt_vocab.sp.id_to_piece(int(t)) for t in train.get("tgt", i)] == bpe.process_line(tokenized).split()
        assert ds.tgt_vocab.decode(train.get("tgt", i).tolist()) == tgt[i].lower()  # detokenized back
    # no piece of the training text is unknown
    assert all(1 not in train.get(side, i).tolist() for side in ("src", "tgt") for i in range(len(train)))


def test_the_subword_choice_is_part_of_the_manifest_key_and_checked(tmp_path):
    from structnmt.data.prepare import _manifest_key, prepare
    from structnmt.fileio.corpus import CorpusError

    assert "subword" not in _manifest_key(PrepareConfig("en", "de", "train"), {})["config"]  # older datasets stay
    key = _manifest_key(PrepareConfig("en", "de", "train", subword="subword-nmt", merges=5), {})["config"]
    assert (key["subword"], key["merges"]) == ("subword-nmt", 5)
    with pytest.raises(CorpusError, match="subword='bpe': choose sentencepiece or subword-nmt"):
        prepare(PrepareConfig("en", "de", str(tmp_path / "train"), subword="bpe"), tmp_path / "out", progress=False)


def test_prepare_through_the_command_line(tmp_path, capsys):
    pref = _corpus(tmp_path, "train", _sentences(120, 5), _sentences(120, 6))
    code, out, err = cli(capsys, "prepare", "-s", "en", "-t", "de", "--trainpref", pref, "--destdir", tmp_path / "d",
                         "--subword", "subword-nmt", "--merges", "40", "--separate-vocab", "--no-progress")
    assert code == 0, err
    ds = PreparedDataset(tmp_path / "d")
    assert ds.src_vocab.bpe is not None and ds.src_vocab.sha256 != ds.tgt_vocab.sha256
    assert (tmp_path / "d" / "bpe.src.codes").is_file() and (tmp_path / "d" / "bpe.tgt.codes").is_file()
    # a SentencePiece option with subword-nmt, or --merges without it: one sentence, nothing written
    for extra, fragment in ((["--subword", "subword-nmt", "--vocab-size", "8000"], "give --merges N instead"),
                            (["--subword", "subword-nmt", "--model-type", "unigram"], "give --merges N instead"),
                            (["--merges", "500"], "add --subword subword-nmt")):
        code, _, err = cli(capsys, "prepare", "-s", "en", "-t", "de", "--trainpref", pref, "--destdir",
                           tmp_path / "e", *extra)
        assert_user_error(code, err, fragment)
        assert not (tmp_path / "e").exists()


def test_a_subword_nmt_model_translates_and_its_checkpoint_carries_the_codes(bpe_data, tmp_path):
    from structnmt.decode.translate import Translator
    from structnmt.models.checkpoint import checkpoint_vocabs, load_checkpoint

    ckpt = _tiny_model(bpe_data["out"], tmp_path / "model")
    state = load_checkpoint(ckpt)
    src, tgt = checkpoint_vocabs(state, ckpt)  # without the dataset: the codes travel in the checkpoint
    ds = PreparedDataset(bpe_data["out"])
    assert src.bpe is not None and (src.sha256, tgt.sha256) == (ds.src_vocab.sha256, ds.tgt_vocab.sha256)
    tr = Translator(ckpt, device="cpu")
    hyps = tr.translate(["Alpha, beta gamma.", "Red cat."])
    for h in hyps:
        assert "@@" not in h[0].text
        assert h[0].text == tr.tgt_vocab.decode(h[0].tokens)
    # the words of a source are read off its piece ids, as the collator reads the training data's: an
    # unknown character inside a word ("ü") is <unk>, which ends the word there, in training and here alike
    text = "alüpha beta."
    ids = tr.src_vocab.encode([text])[0]
    words = tr._parse([text])[0][1]
    assert words.tolist() == tr.src_vocab.word_of_piece(ids).tolist()
    from structnmt.syntax.features import word_of_piece_from_pieces

    assert words.tolist() != word_of_piece_from_pieces(tr.src_vocab.encode_pieces([text])[0]).tolist()


def test_prepare_with_a_file_parser_aligns_non_ascii_words(tmp_path):
    from structnmt.data.prepare import prepare
    from structnmt.syntax.parsers import ParserConfig

    lines = ["über die Straße .", "die Brücke über die Straße .", "naïve café ."] * 8
    (tmp_path / "train.en").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    (tmp_path / "train.de").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    conllu = "".join("".join(f"{k}\t{w}\t_\t_\t_\t_\t{0 if k == 1 else 1}\t{'root' if k == 1 else 'dep'}\t_\t_\n"
                             for k, w in enumerate(x.split(), 1)) + "\n" for x in lines)
    (tmp_path / "train.en.conllu").write_text(conllu, encoding="utf-8")
    cfg = PrepareConfig(source_lang="en", target_lang="de", trainpref=str(tmp_path / "train"), subword="subword-nmt",
                        merges=12, parser=ParserConfig(name="file", dependency_file="{prefix}.{lang}.conllu"))
    manifest = prepare(cfg, tmp_path / "d", progress=False, log=lambda *_: None)
    assert manifest["counts"]["train"]["dropped_unaligned"] == 0 and manifest["counts"]["train"]["merged_words"] == 0
    ds = PreparedDataset(tmp_path / "d")
    train = ds.split("train")
    for i in range(len(train)):  # the parser's words are the whitespace words
        assert train.word_of_piece(i).tolist() == ds.src_vocab.word_of_piece(train.get("src", i)).tolist()


def test_prepare_with_a_parser_aligns_subword_nmt_pieces_to_words(tmp_path):
    from structnmt.data.prepare import prepare
    from structnmt.data.synthetic import SynthConfig, write_corpus
    from structnmt.syntax.parsers import ParserConfig

    corpus = tmp_path / "corpus"
    write_corpus(SynthConfig(n_train=120, n_valid=10, n_test=10), corpus)
    cfg = PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(corpus / "train"),
                        validpref=str(corpus / "valid"), subword="subword-nmt", merges=30,
                        parser=ParserConfig(name="synthetic"))
    manifest = prepare(cfg, tmp_path / "d", progress=False, log=lambda *_: None)
    assert manifest["counts"]["train"]["dropped_unaligned"] == 0
    ds = PreparedDataset(tmp_path / "d")
    train = ds.split("train")
    assert train.has_trees
    for i in range(len(train)):  # the parser's words are the whitespace words: the two readings agree
        ids = train.get("src", i)
        assert train.word_of_piece(i).tolist() == ds.src_vocab.word_of_piece(ids).tolist()


def test_a_damaged_subword_nmt_model_is_one_sentence(bpe_data, tmp_path, capsys):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(bpe_data["out"], data)
    model = data / "bpe.model"
    model.write_bytes(model.read_bytes()[:-20])
    with pytest.raises(VocabError, match=r"bpe\.model: not a readable SentencePiece or subword-nmt model"):
        PreparedDataset(data)
    code, _, err = cli(capsys, "train", write_config(tmp_path / "c.yaml", data, tmp_path / "run"), "--no-progress")
    assert_user_error(code, err, "bpe.model", "not a readable")
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").glob("checkpoint*"))


def test_unknown_characters_read_as_unk(tmp_path):
    vocab, _ = train_subword_nmt(["abc abd", "abc"], Path(tmp_path) / "bpe", merges=5)
    ids = vocab.encode(["abz"])[0]
    assert 1 in ids and vocab.decode(ids).endswith("<unk>")


def test_a_sentencepiece_model_with_other_special_ids_is_a_vocab_error(tmp_path):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT * 5), model_prefix=str(tmp_path / "other"), vocab_size=30,
                                   hard_vocab_limit=False, minloglevel=2)  # SentencePiece's defaults: unk 0, bos 1, eos 2
    with pytest.raises(VocabError, match=r"other\.model: a SentencePiece model with other special ids"):
        Vocab(tmp_path / "other.model")


def test_a_word_level_mechanism_reads_subword_nmt_words(bpe_data, tmp_path):
    """MG-SA's n-gram phrases without a parse are built over the vocabulary's words (for subword-nmt, a piece
    ending in @@ is continued by the next), in the collator as in the dataset; such a model trains on the data."""
    import json
    import math

    from structnmt.cli.training import train
    from structnmt.config import AttentionSpec, Config, DataConfig, ModelConfig, TrainConfig
    from structnmt.data.dataset import collate
    from structnmt.models.transformer import TransformerModel

    ds = PreparedDataset(bpe_data["out"])
    split = ds.split("train")
    i = next(k for k in range(len(split)) if any(ds.src_vocab.sp.id_to_piece(int(t)).endswith("@@")
                                                 for t in split.get("src", k)))
    raw = [ds.src_vocab.sp.id_to_piece(int(t)) for t in split.get("src", i)]
    expected, w = [], 0
    for k in range(len(raw)):
        w += k > 0 and not raw[k - 1].endswith("@@")
        expected.append(w)
    assert split.word_of_piece(i).tolist() == expected and expected[-1] < len(raw) - 1  # a word of several pieces
    model_cfg = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1)
    model_cfg.attention.overrides = {"encoder_self.0": AttentionSpec(name="mgsa", options={"preset": "ngram"})}
    specs = TransformerModel(model_cfg, len(ds.src_vocab), len(ds.tgt_vocab)).required_structures()
    batch = collate(split, np.array([i]), specs)
    assert batch.structures["mgsa.ngram2"][0, : len(raw)].tolist() == [x // 2 for x in expected]  # bigrams of words
    cfg = Config(data=DataConfig(path=str(bpe_data["out"]), max_tokens=600), model=model_cfg,
                 train=TrainConfig(save_dir=str(tmp_path / "m"), max_updates=3, validate_interval_updates=3,
                                   validate_bleu=False, tensorboard=False, progress=False, log_interval=1))
    assert train(cfg, log=lambda *_: None).num_updates == 3
    losses = [json.loads(x)["loss"] for x in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()
              if json.loads(x)["kind"] == "train"]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
