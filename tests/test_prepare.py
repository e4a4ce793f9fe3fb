"""Tests for `structnmt prepare` (structnmt.data.prepare) on tiny generated corpora."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

from structnmt.data.dataset import PreparedDataset
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.fileio.corpus import CorpusError

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron "
         "pi rho sigma tau upsilon phi chi psi omega red green blue cat dog bird").split()


def _sentences(n: int, seed: int, lo: int = 2, hi: int = 12) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


def _write(path: Path, lines: list[str | bytes], *, gz: bool = False) -> Path:
    data = b"".join((ln if isinstance(ln, bytes) else ln.encode("utf-8")) + b"\n" for ln in lines)
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def _corpus(root: Path, name: str, src: list, tgt: list, *, gz: bool = False) -> str:
    root.mkdir(parents=True, exist_ok=True)
    ext = ".gz" if gz else ""
    _write(root / f"{name}.en{ext}", src, gz=gz)
    _write(root / f"{name}.de{ext}", tgt, gz=gz)
    return str(root / name)


def _cfg(trainpref: str, **kw) -> PrepareConfig:
    kw.setdefault("vocab_size", 150)
    return PrepareConfig(source_lang="en", target_lang="de", trainpref=trainpref, **kw)


class Log(list):
    def __call__(self, msg: str) -> None:
        self.append(msg)


def _run(cfg: PrepareConfig, out: Path) -> tuple[dict, Log]:
    log = Log()
    return prepare(cfg, out, progress=False, log=log), log


@pytest.fixture(scope="module")
def standard(tmp_path_factory):
    """Train (empty lines at 3 places), valid (one empty line) and test; joint vocab."""
    root = tmp_path_factory.mktemp("std")
    src, tgt = _sentences(300, 1), _sentences(300, 2)
    src[10] = ""  # line 11
    tgt[150] = "   "  # line 151
    src[299] = tgt[299] = ""  # line 300
    vsrc, vtgt = _sentences(40, 3), _sentences(40, 4)
    vtgt[5] = ""  # line 6
    tsrc, ttgt = _sentences(30, 5), _sentences(30, 6)
    cfg = _cfg(_corpus(root, "train", src, tgt), validpref=_corpus(root, "valid", vsrc, vtgt),
               testprefs=[_corpus(root, "test", tsrc, ttgt)])
    manifest, log = _run(cfg, root / "data")
    return {"root": root, "out": root / "data", "cfg": cfg, "manifest": manifest, "log": log,
            "text": {"train": (src, tgt), "valid": (vsrc, vtgt), "test": (tsrc, ttgt)}}


def _kept(src: list[str], tgt: list[str]) -> list[tuple[int, str, str]]:
    return [(i + 1, s.strip(), t.strip()) for i, (s, t) in enumerate(zip(src, tgt)) if s.strip() and t.strip()]


# ---------------------------------------------------------------------------- layout, counts


def test_layout_and_manifest(standard):
    out, m = standard["out"], standard["manifest"]
    assert json.loads((out / "manifest.json").read_text()) == m
    assert not (out.parent / (out.name + ".tmp")).exists()
    for split in ("train", "valid", "test"):
        for suffix in ("src.bin", "tgt.bin", "src.idx", "tgt.idx", "lines"):
            assert (out / f"{split}.{suffix}").exists()
    for split in ("valid", "test"):
        assert (out / f"{split}.src.txt").exists() and (out / f"{split}.ref.txt").exists()
    assert not (out / "train.ref.txt").exists()
    assert (out / "spm.model").exists()
    assert m["joint_vocab"] is True
    assert m["vocab"]["src"] == m["vocab"]["tgt"]
    assert m["vocab"]["src"]["file"] == "spm.model"
    assert set(m["inputs"]) == {str(standard["root"] / f"{s}.{lang}") for s in ("train", "valid", "test")
                                for lang in ("en", "de")}
    assert m["config"]["vocab_size"] == 150


def test_empty_lines_dropped_and_counted(standard):
    c = standard["manifest"]["counts"]
    assert c["train"]["lines"] == 300 and c["train"]["dropped_empty"] == 3
    assert c["train"]["first_empty_lines"] == [11, 151, 300]
    assert c["train"]["kept"] == 297 and c["train"]["dropped_too_long"] == 0
    assert c["valid"]["dropped_empty"] == 1 and c["valid"]["first_empty_lines"] == [6] and c["valid"]["kept"] == 39
    assert c["test"]["dropped_empty"] == 0 and c["test"]["kept"] == 30
    assert any("dropped 3 empty" in msg and "[11, 151, 300]" in msg for msg in standard["log"])
    ds = PreparedDataset(standard["out"])
    for split in ("train", "valid", "test"):
        assert len(ds.split(split)) == c[split]["kept"]
        lines = np.fromfile(standard["out"] / f"{split}.lines", dtype=np.int64)
        assert len(lines) == c[split]["kept"]
        sp = ds.split(split)
        assert c[split]["src_tokens"] == int(sp.src_lens.sum())
        assert c[split]["tgt_tokens"] == int(sp.tgt_lens.sum())


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_round_trip_and_line_numbers(standard, split):
    ds = PreparedDataset(standard["out"])
    sp = ds.split(split)
    kept = _kept(*standard["text"][split])
    lines = np.fromfile(standard["out"] / f"{split}.lines", dtype=np.int64)
    assert lines.tolist() == [k[0] for k in kept]  # no misalignment after an empty line
    assert len(sp) == len(kept)
    for i, (_, s, t) in enumerate(kept):
        assert ds.src_vocab.decode(sp.get("src", i).tolist()) == s
        assert ds.tgt_vocab.decode(sp.get("tgt", i).tolist()) == t
    if split != "train":
        assert sp.text("src") == [k[1] for k in kept]
        assert sp.text("ref") == [k[2] for k in kept]


def test_offsets_are_consistent(standard):
    sp = PreparedDataset(standard["out"]).split("train")
    for side in ("src", "tgt"):
        off = sp.offsets[side]
        assert off[0] == 0 and np.all(np.diff(off) >= 1) and off[-1] == len(sp.data[side])
    assert sp.data["src"].dtype == np.int32


# ---------------------------------------------------------------------------- bad input


def _expect(cfg: PrepareConfig, out: Path, *fragments: str) -> str:
    with pytest.raises(CorpusError) as info:
        prepare(cfg, out, progress=False, log=Log())
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, (frag, msg)
    assert not (out / "manifest.json").exists()
    return msg


@pytest.mark.parametrize("joint", [True, False])
def test_train_line_count_mismatch(tmp_path, joint):
    pref = _corpus(tmp_path, "train", _sentences(200, 1), _sentences(197, 2))
    _expect(_cfg(pref, joint_vocab=joint), tmp_path / "out",
            f"{pref}.en has 200 lines", f"{pref}.de has 197")


def test_valid_line_count_mismatch(tmp_path):
    pref = _corpus(tmp_path, "train", _sentences(200, 1), _sentences(200, 2))
    vpref = _corpus(tmp_path, "valid", _sentences(20, 1), _sentences(23, 2))
    _expect(_cfg(pref, validpref=vpref), tmp_path / "out", f"{vpref}.en has 20 lines", f"{vpref}.de has 23")


@pytest.mark.parametrize("joint", [True, False])
def test_train_invalid_utf8(tmp_path, joint):
    tgt = [s.encode() for s in _sentences(200, 2)]
    tgt[120] = b"gamma caf\xe9 delta"
    pref = _corpus(tmp_path, "train", _sentences(200, 1), tgt)
    _expect(_cfg(pref, joint_vocab=joint), tmp_path / "out", f"{pref}.de line 121", "UTF-8")


def test_test_split_invalid_utf8(tmp_path):
    pref = _corpus(tmp_path, "train", _sentences(200, 1), _sentences(200, 2))
    src = [s.encode() for s in _sentences(10, 1)]
    src[0] = b"\x80"
    tpref = _corpus(tmp_path, "test", src, _sentences(10, 2))
    _expect(_cfg(pref, testprefs=[tpref]), tmp_path / "out", f"{tpref}.en line 1", "UTF-8")


@pytest.mark.parametrize("joint", [True, False])
def test_empty_corpus(tmp_path, joint):
    pref = _corpus(tmp_path, "train", [""] * 50, _sentences(50, 2))
    _expect(_cfg(pref, joint_vocab=joint), tmp_path / "out", f"{pref}.en", f"{pref}.de", "no usable sentence pairs")


def test_zero_byte_corpus(tmp_path):
    pref = _corpus(tmp_path, "train", [], [])
    _expect(_cfg(pref), tmp_path / "out", f"{pref}.en", "no usable sentence pairs")


def test_empty_valid_split(tmp_path):
    pref = _corpus(tmp_path, "train", _sentences(200, 1), _sentences(200, 2))
    vpref = _corpus(tmp_path, "valid", ["", " "], ["x", "y"])
    _expect(_cfg(pref, validpref=vpref), tmp_path / "out", f"{vpref}.en", "no usable sentence pairs")


def test_missing_files(tmp_path):
    pref = _corpus(tmp_path, "train", _sentences(50, 1), _sentences(50, 2))
    (tmp_path / "train.de").unlink()
    _expect(_cfg(pref), tmp_path / "out", f"{pref}.de", "not found")
    _expect(_cfg(str(tmp_path / "nothing")), tmp_path / "out", str(tmp_path / "nothing.en"), "not found")
    pref = _corpus(tmp_path, "train", _sentences(50, 1), _sentences(50, 2))
    _expect(_cfg(pref, validpref=str(tmp_path / "valid")), tmp_path / "out", str(tmp_path / "valid.en"))


def test_over_long_training_pairs_filtered_and_counted(tmp_path):
    src, tgt = _sentences(300, 1, 2, 6), _sentences(300, 2, 2, 6)
    long_at = [5, 77, 200]  # 0-based
    for i in long_at[:2]:
        src[i] = " ".join(["alpha beta gamma delta"] * 40)
    tgt[long_at[2]] = " ".join(["omega psi chi"] * 40)
    vsrc, vtgt = _sentences(20, 3), _sentences(20, 4)
    vsrc[3] = " ".join(["alpha beta gamma delta"] * 40)  # valid/test pairs are never filtered
    pref = _corpus(tmp_path, "train", src, tgt)
    cfg = _cfg(pref, validpref=_corpus(tmp_path, "valid", vsrc, vtgt), max_len=40)
    m, log = _run(cfg, tmp_path / "out")
    c = m["counts"]["train"]
    assert c["dropped_too_long"] == 3 and c["kept"] == 297 and c["dropped_empty"] == 0
    lines = np.fromfile(tmp_path / "out" / "train.lines", dtype=np.int64)
    assert set(range(1, 301)) - set(lines.tolist()) == {i + 1 for i in long_at}
    sp = PreparedDataset(tmp_path / "out").split("train")
    assert sp.src_lens.max() <= 40 and sp.tgt_lens.max() <= 40
    assert m["counts"]["valid"]["dropped_too_long"] == 0 and m["counts"]["valid"]["kept"] == 20
    assert any("3 pairs longer than 40" in msg for msg in log)


def test_all_pairs_too_long_is_an_error(tmp_path):
    pref = _corpus(tmp_path, "train", _sentences(100, 1, 8, 12), _sentences(100, 2, 8, 12))
    _expect(_cfg(pref, max_len=2), tmp_path / "out", "no usable sentence pairs", "100 too long")


def test_gzip_input_gives_same_data(tmp_path):
    src, tgt = _sentences(250, 1), _sentences(250, 2)
    src[7] = ""
    plain = _corpus(tmp_path / "plain", "train", src, tgt)
    gz = _corpus(tmp_path / "gz", "train", src, tgt, gz=True)
    vsrc, vtgt = _sentences(20, 3), _sentences(20, 4)
    vplain = _corpus(tmp_path / "plain", "valid", vsrc, vtgt)
    vgz = _corpus(tmp_path / "gz", "valid", vsrc, vtgt, gz=True)
    m1, _ = _run(_cfg(plain, validpref=vplain), tmp_path / "o1")
    m2, _ = _run(_cfg(gz, validpref=vgz), tmp_path / "o2")
    assert str(tmp_path / "gz" / "train.en.gz") in m2["inputs"]
    for split in ("train", "valid"):
        for k in ("lines", "kept", "dropped_empty", "src_tokens", "tgt_tokens"):
            assert m1["counts"][split][k] == m2["counts"][split][k]
        for suffix in ("src.bin", "tgt.bin", "src.idx", "tgt.idx", "lines"):
            assert (tmp_path / "o1" / f"{split}.{suffix}").read_bytes() == \
                (tmp_path / "o2" / f"{split}.{suffix}").read_bytes()
    assert (tmp_path / "o1" / "valid.ref.txt").read_text() == (tmp_path / "o2" / "valid.ref.txt").read_text()


def test_text_files_keep_alignment_with_odd_characters(tmp_path):
    """Characters that str.splitlines() treats as line breaks must not split a sentence."""
    pref = _corpus(tmp_path, "train", _sentences(200, 1), _sentences(200, 2))
    vsrc = ["alpha beta", "gamma\rdelta", "eta\x0ctheta", "iota\u2028kappa", "mu nu", "xi\x1comicron", "pi"]
    vtgt = ["one", "two\u2029three", "four", "five\x85six", "", "seven", "eight"]
    vpref = _corpus(tmp_path, "valid", vsrc, vtgt)
    m, _ = _run(_cfg(pref, validpref=vpref), tmp_path / "out")
    sp = PreparedDataset(tmp_path / "out").split("valid")
    kept = _kept(vsrc, vtgt)
    assert m["counts"]["valid"]["kept"] == len(kept) == len(sp) == 6
    assert sp.text("src") == [k[1] for k in kept]
    assert sp.text("ref") == [k[2] for k in kept]


# ---------------------------------------------------------------------------- vocabularies


def test_separate_vocabularies(tmp_path):
    src = _sentences(300, 1)
    tgt = [s.upper() for s in _sentences(300, 2)]  # disjoint alphabets
    pref = _corpus(tmp_path, "train", src, tgt)
    m, _ = _run(_cfg(pref, joint_vocab=False, vocab_size=120, tgt_vocab_size=90), tmp_path / "out")
    out = tmp_path / "out"
    assert (out / "spm.src.model").exists() and (out / "spm.tgt.model").exists()
    assert not (out / "spm.model").exists()
    assert m["joint_vocab"] is False
    assert m["vocab"]["src"]["file"] == "spm.src.model" and m["vocab"]["tgt"]["file"] == "spm.tgt.model"
    ds = PreparedDataset(out)
    assert ds.src_vocab is not ds.tgt_vocab
    assert m["vocab"]["src"]["size"] == len(ds.src_vocab) and m["vocab"]["tgt"]["size"] == len(ds.tgt_vocab)
    assert len(ds.src_vocab) != len(ds.tgt_vocab)
    assert len(ds.tgt_vocab) <= 90
    # the target model knows no lowercase pieces, the source model no uppercase ones
    assert not any(ds.tgt_vocab.sp.id_to_piece(i).strip("\u2581").islower() for i in range(4, len(ds.tgt_vocab)))
    assert not any(ds.src_vocab.sp.id_to_piece(i).strip("\u2581").isupper() for i in range(4, len(ds.src_vocab)))
    sp = ds.split("train")
    for i in (0, 17, 299):
        assert ds.src_vocab.decode(sp.get("src", i).tolist()) == src[i]
        assert ds.tgt_vocab.decode(sp.get("tgt", i).tolist()) == tgt[i]


def test_joint_vocabulary_covers_both_sides(tmp_path):
    src = _sentences(300, 1)
    tgt = [s.upper() for s in _sentences(300, 2)]
    m, _ = _run(_cfg(_corpus(tmp_path, "train", src, tgt), vocab_size=200), tmp_path / "out")
    ds = PreparedDataset(tmp_path / "out")
    assert ds.src_vocab is ds.tgt_vocab and m["vocab"]["src"]["size"] == len(ds.src_vocab)
    pieces = [ds.src_vocab.sp.id_to_piece(i).strip("\u2581") for i in range(4, len(ds.src_vocab))]
    assert any(p.islower() for p in pieces) and any(p.isupper() for p in pieces)


# ---------------------------------------------------------------------------- reuse / rebuild


def test_reuse_and_rebuild(tmp_path):
    src, tgt = _sentences(250, 1), _sentences(250, 2)
    pref = _corpus(tmp_path, "train", src, tgt)
    vpref = _corpus(tmp_path, "valid", _sentences(20, 3), _sentences(20, 4))
    out = tmp_path / "out"
    cfg = _cfg(pref, validpref=vpref)
    m1, _ = _run(cfg, out)
    binf = out / "train.src.bin"
    old_ns = binf.stat().st_mtime_ns - 10**9  # push the mtime back so any rewrite is visible
    os.utime(binf, ns=(old_ns, old_ns))

    m2, log = _run(cfg, out)
    assert m2 == m1
    assert any("up to date" in msg and "reusing" in msg for msg in log)
    assert binf.stat().st_mtime_ns == old_ns

    # same config and inputs through a fresh but equal config object: still reused
    m3, log = _run(_cfg(pref, validpref=vpref), out)
    assert any("reusing" in msg for msg in log) and binf.stat().st_mtime_ns == old_ns

    # changed content of one input file -> rebuild, the message names that file only
    tgt2 = list(tgt)
    tgt2[3] = "completely different words here"
    _write(tmp_path / "train.de", tgt2)
    m4, log = _run(cfg, out)
    stale = [msg for msg in log if "stale" in msg]
    assert len(stale) == 1 and str(tmp_path / "train.de") in stale[0]
    assert str(tmp_path / "train.en") not in stale[0] and str(tmp_path / "valid.de") not in stale[0]
    assert m4["inputs"] != m1["inputs"]
    assert binf.stat().st_mtime_ns != old_ns
    ds = PreparedDataset(out)
    assert ds.tgt_vocab.decode(ds.split("train").get("tgt", 3).tolist()) == tgt2[3]

    # changed config -> rebuild, said so
    os.utime(binf, ns=(old_ns, old_ns))
    m5, log = _run(_cfg(pref, validpref=vpref, vocab_size=120), out)
    assert any("stale" in msg and "config changed" in msg for msg in log)
    assert m5["config"]["vocab_size"] == 120 and binf.stat().st_mtime_ns != old_ns

    m6, log = _run(_cfg(pref, validpref=vpref, vocab_size=120), out)
    assert any("reusing" in msg for msg in log) and m6 == m5


def test_failed_rebuild_keeps_nothing_half_written(tmp_path):
    pref = _corpus(tmp_path, "train", _sentences(200, 1), _sentences(200, 2))
    out = tmp_path / "out"
    _run(_cfg(pref), out)
    _write(tmp_path / "train.de", _sentences(199, 2))
    _expect(_cfg(pref), tmp_path / "other", "has 200 lines", "has 199")
    # the old dataset is still complete, and a retry on the broken input keeps failing
    with pytest.raises(CorpusError):
        prepare(_cfg(pref), out, progress=False, log=Log())
    assert (out / "manifest.json").exists()
    assert len(PreparedDataset(out).split("train")) == 200


# ---------------------------------------------------------------------------- --lowercase


@pytest.fixture(scope="module")
def lowercased(tmp_path_factory):
    """A corpus with capitalised words, prepared with ``lowercase=True`` (joint vocabulary)."""
    root = tmp_path_factory.mktemp("lc")
    src = [" ".join(w.capitalize() if i % 2 else w.upper() for i, w in enumerate(s.split()))
           for s in _sentences(250, 11)]
    tgt = [s.capitalize() for s in _sentences(250, 12)]
    vsrc, vtgt = [s.title() for s in _sentences(20, 13)], [s.title() for s in _sentences(20, 14)]
    cfg = _cfg(_corpus(root, "train", src, tgt), validpref=_corpus(root, "valid", vsrc, vtgt), lowercase=True)
    manifest, _ = _run(cfg, root / "data")
    return {"out": root / "data", "manifest": manifest, "cfg": cfg, "train": (src, tgt), "valid": (vsrc, vtgt)}


def test_lowercase_trains_and_encodes_lowercased_text_and_keeps_raw_references(lowercased):
    out, m = lowercased["out"], lowercased["manifest"]
    assert m["config"]["lowercase"] is True
    assert m["vocab"]["src"]["lowercase"] is True and m["vocab"]["tgt"]["lowercase"] is True
    ds = PreparedDataset(out)
    assert ds.src_vocab.lowercase and ds.tgt_vocab.lowercase
    pieces = [ds.src_vocab.sp.id_to_piece(i) for i in range(len(ds.src_vocab))]
    assert not any(ch.isupper() for p in pieces for ch in p)  # SentencePiece never saw a capital
    src, tgt = lowercased["train"]
    train = ds.split("train")
    assert ds.tgt_vocab.decode(train.get("tgt", 0).tolist()) == tgt[0].lower() != tgt[0]
    assert ds.src_vocab.decode(train.get("src", 0).tolist()) == src[0].lower()
    # cased input encodes exactly as its lowercased form (what translation relies on)
    assert ds.src_vocab.encode([src[3]]) == ds.src_vocab.encode([src[3].lower()])
    assert ds.src_vocab.encode([src[3]])[0] == train.get("src", 3).tolist()
    # references and sources for BLEU and decoding stay raw (cased)
    vsrc, vtgt = lowercased["valid"]
    assert (out / "valid.ref.txt").read_text(encoding="utf-8").splitlines() == vtgt
    assert (out / "valid.src.txt").read_text(encoding="utf-8").splitlines() == vsrc


def test_lowercase_is_part_of_the_vocabulary_identity_and_of_the_manifest_key(lowercased, tmp_path):
    from structnmt.data.prepare import _manifest_key
    from structnmt.data.vocab import Vocab
    from structnmt.models.checkpoint import checkpoint_vocabs, dataset_vocabs, vocab_entry

    ds = PreparedDataset(lowercased["out"])
    cased = Vocab(proto=ds.src_vocab.proto)
    assert cased.sha256 != ds.src_vocab.sha256 and not cased.lowercase
    assert cased.encode(["Alpha"]) != ds.src_vocab.encode(["Alpha"])
    # the flag travels: checkpoint entry -> vocabularies, and dataset directory -> vocabularies
    state = {"vocab_models": vocab_entry(ds.src_vocab, ds.tgt_vocab), "vocab": {"src": "spm.model", "tgt": "spm.model"},
             "config": {}}
    src, tgt = checkpoint_vocabs(state, "ckpt.pt")
    assert src.lowercase and tgt.lowercase and src.sha256 == ds.src_vocab.sha256
    src2, _ = dataset_vocabs(lowercased["out"], {"src": "spm.model", "tgt": "spm.model"})
    assert src2.lowercase and src2.sha256 == ds.src_vocab.sha256
    # a cased dataset with the same pieces is refused for this checkpoint
    from structnmt.errors import CheckpointError
    from structnmt.models.checkpoint import check_same_vocab

    with pytest.raises(CheckpointError, match="not the one"):
        check_same_vocab(state, cased, cased, checkpoint="ckpt.pt", data="cased-data")
    # datasets prepared before the option existed keep their manifest key (not rebuilt)
    plain = _cfg("train")
    assert "lowercase" not in _manifest_key(plain, {})["config"]
    assert _manifest_key(_cfg("train", lowercase=True), {})["config"]["lowercase"] is True


@pytest.mark.parametrize("option", ["lowercase", "moses"])
def test_a_text_form_with_a_parser_is_refused_with_the_fix(tmp_path, option):
    from structnmt.syntax.parsers import ParserConfig

    pref = _corpus(tmp_path, "train", _sentences(50, 1), _sentences(50, 2))
    with pytest.raises(CorpusError, match=f"--{option}.*--parser none"):
        _run(_cfg(pref, **{option: True}, parser=ParserConfig(name="synthetic")), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _tiny_model(data: Path, save: Path) -> Path:
    """A 1+1-layer Transformer trained 3 updates on ``data``; its last checkpoint."""
    from structnmt.cli.training import train
    from structnmt.config import Config, DataConfig, ModelConfig, TrainConfig

    cfg = Config(data=DataConfig(path=str(data), max_tokens=600),
                 model=ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1,
                                   share_all_embeddings=True),
                 train=TrainConfig(seed=1, save_dir=str(save), warmup_updates=1, max_updates=3,
                                   save_interval_updates=3, validate_interval_updates=3, tensorboard=False,
                                   progress=False))
    train(cfg, log=lambda *_a, **_k: None)
    return save / "checkpoint_last.pt"


def test_a_model_trained_on_lowercased_data_lowercases_what_it_translates(lowercased, tmp_path):
    from structnmt.decode.translate import Translator
    from structnmt.models.checkpoint import load_checkpoint

    ckpt = _tiny_model(lowercased["out"], tmp_path / "model")
    state = load_checkpoint(ckpt)
    assert state["vocab_models"]["src"]["lowercase"] is True
    tr = Translator(ckpt, device="cpu")
    assert tr.src_vocab.lowercase
    cased, lower = ["ALPHA Beta Gamma dog", "Red CAT"], ["alpha beta gamma dog", "red cat"]
    a = [(h[0].text, h[0].score) for h in tr.translate(cased)]
    b = [(h[0].text, h[0].score) for h in tr.translate(lower)]
    assert a == b  # the same pieces in, so the same search and scores
    tr.src_vocab.lowercase = False  # a reader of the cased text would see other pieces: other scores
    assert [(h[0].text, h[0].score) for h in tr.translate(cased)] != a


# ---------------------------------------------------------------------------- --moses


def _punctuated(n: int, seed: int) -> list[str]:
    """Sentences with commas, a closing full stop and a quoted word glued to their neighbours."""
    rng = random.Random(seed)
    out = []
    for s in _sentences(n, seed, lo=3):
        words = s.split()
        words[0] = words[0].capitalize()
        words[1] = words[1] + ","
        if rng.random() < 0.5:
            words[-1] = f'"{words[-1]}"'
        out.append(" ".join(words) + ".")
    return out


@pytest.fixture(scope="module")
def mosesed(tmp_path_factory):
    """A punctuated corpus prepared with ``moses=True`` and ``lowercase=True`` (joint vocabulary)."""
    root = tmp_path_factory.mktemp("moses")
    src, tgt = _punctuated(250, 21), _punctuated(250, 22)
    vsrc, vtgt = _punctuated(20, 23), _punctuated(20, 24)
    cfg = _cfg(_corpus(root, "train", src, tgt), validpref=_corpus(root, "valid", vsrc, vtgt), lowercase=True,
               moses=True)
    manifest, _ = _run(cfg, root / "data")
    return {"out": root / "data", "manifest": manifest, "train": (src, tgt), "valid": (vsrc, vtgt)}


def test_moses_tokenizes_each_side_in_its_language_before_sentencepiece(mosesed):
    from structnmt.data.moses import moses_pretokenize

    out, m = mosesed["out"], mosesed["manifest"]
    assert m["config"]["moses"] is True
    assert m["vocab"]["src"]["moses"] == "en" and m["vocab"]["tgt"]["moses"] == "de"
    ds = PreparedDataset(out)
    # one SentencePiece model, two readers of it: one per language
    assert ds.src_vocab is not ds.tgt_vocab and ds.src_vocab.proto == ds.tgt_vocab.proto
    assert (ds.src_vocab.moses, ds.tgt_vocab.moses) == ("en", "de")
    src, tgt = mosesed["train"]
    # SentencePiece saw the punctuation split off: ',' and '.' begin pieces of their own
    pieces = ds.src_vocab.encode_pieces([src[0]])[0]
    assert "▁," in pieces and "▁." in pieces
    train = ds.split("train")
    assert train.get("src", 0).tolist() == ds.src_vocab.sp.encode(moses_pretokenize(src[0], "en").lower())
    # decoding detokenizes: the lowercased sentence comes back whole, glued punctuation included
    assert ds.tgt_vocab.decode(train.get("tgt", 0).tolist()) == tgt[0].lower()
    assert ds.src_vocab.decode(train.get("src", 5).tolist()) == src[5].lower()
    # the raw text stays raw, for BLEU and for decoding
    vsrc, vtgt = mosesed["valid"]
    assert (out / "valid.ref.txt").read_text(encoding="utf-8").splitlines() == vtgt
    assert (out / "valid.src.txt").read_text(encoding="utf-8").splitlines() == vsrc


def test_moses_is_part_of_the_vocabulary_identity_and_travels_with_checkpoints(mosesed):
    from structnmt.data.prepare import _manifest_key
    from structnmt.data.vocab import Vocab
    from structnmt.errors import CheckpointError
    from structnmt.models.checkpoint import (
        check_same_vocab,
        checkpoint_vocabs,
        dataset_vocabs,
        vocab_entry,
    )

    ds = PreparedDataset(mosesed["out"])
    raw = Vocab(proto=ds.src_vocab.proto, lowercase=True)
    assert raw.sha256 != ds.src_vocab.sha256 != ds.tgt_vocab.sha256
    assert raw.encode(["alpha, beta."]) != ds.src_vocab.encode(["alpha, beta."])
    state = {"vocab_models": vocab_entry(ds.src_vocab, ds.tgt_vocab), "vocab": {"src": "spm.model", "tgt": "spm.model"},
             "config": {}}
    for src, tgt in (checkpoint_vocabs(state, "ckpt.pt"),
                     dataset_vocabs(mosesed["out"], {"src": "spm.model", "tgt": "spm.model"})):
        assert (src.moses, tgt.moses) == ("en", "de") and src.lowercase and tgt.lowercase
        assert (src.sha256, tgt.sha256) == (ds.src_vocab.sha256, ds.tgt_vocab.sha256)
    with pytest.raises(CheckpointError, match="not the one"):  # the same pieces without Moses: refused
        check_same_vocab(state, raw, raw, checkpoint="ckpt.pt", data="raw-data")
    assert "moses" not in _manifest_key(_cfg("train"), {})["config"]  # older datasets are not rebuilt
    assert _manifest_key(_cfg("train", moses=True), {})["config"]["moses"] is True


def test_moses_names_a_language_it_has_no_rules_for(tmp_path):
    _write(tmp_path / "train.src", _punctuated(60, 31))
    _write(tmp_path / "train.de", _punctuated(60, 32))
    cfg = PrepareConfig(source_lang="src", target_lang="de", trainpref=str(tmp_path / "train"), vocab_size=80,
                        moses=True)
    _, log = _run(cfg, tmp_path / "out")
    said = [m for m in log if "no Moses rules" in m]
    assert len(said) == 1 and "'src'" in said[0] and "'de'" not in said[0]
    assert PreparedDataset(tmp_path / "out").src_vocab.moses == "src"


def test_a_model_trained_on_moses_data_tokenizes_its_input_and_detokenizes_its_output(mosesed, tmp_path):
    from structnmt.data.moses import moses_detokenize
    from structnmt.decode.translate import Translator

    ckpt = _tiny_model(mosesed["out"], tmp_path / "model")
    tr = Translator(ckpt, device="cpu")
    assert (tr.src_vocab.moses, tr.tgt_vocab.moses) == ("en", "de")
    # English normalisation moves the full stop inside the quotes, as normalize-punctuation.perl -l en does
    glued, spaced = ['Alpha, beta "gamma".', "Red cat."], ['alpha , beta " gamma . "', "red cat ."]
    a = [(h[0].text, h[0].score) for h in tr.translate(glued)]
    assert a == [(h[0].text, h[0].score) for h in tr.translate(spaced)]  # the same pieces in
    for (text, _), hyps in zip(a, tr.translate(glued)):  # the output is Moses-detokenized
        assert text == moses_detokenize(tr.tgt_vocab.sp.decode(hyps[0].tokens), "de")
    tr.src_vocab.moses = None  # a reader of the untokenized text would see other pieces: other scores
    assert [(h[0].text, h[0].score) for h in tr.translate(glued)] != a
    # the commands that align raw text (a treebank's words) to the model's pieces refuse it with the fix
    from structnmt.analysis.probe import load_frozen
    from structnmt.errors import UserError
    from structnmt.tasks.induce import run_induce

    conllu = tmp_path / "t.conllu"
    conllu.write_text("1\tAlpha\t_\t_\t_\t_\t0\troot\t_\t_\n2\t,\t_\t_\t_\t_\t1\tpunct\t_\t_\n\n", encoding="utf-8")
    with pytest.raises(UserError, match="Moses-tokenized text.*without --moses"):
        run_induce(checkpoint=ckpt, conllu=conllu, out_dir=tmp_path / "induced")
    with pytest.raises(UserError, match="trained on Moses-tokenized text.*without --lowercase and --moses"):
        load_frozen(str(ckpt))


def test_a_killed_prepare_s_leftover_directory_is_removed_by_the_next(tmp_path):
    """A SIGKILLed prepare leaves `.DIR.prepare-XXXX` beside the destination; the next prepare of it removes it (and
    says so), and leaves any other directory alone."""
    pref = _corpus(tmp_path / "c", "train", _sentences(60, 1), _sentences(60, 2))
    out = tmp_path / "data"
    stale = tmp_path / ".data.prepare-abc123"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "half.bin").write_bytes(b"x")
    other = tmp_path / ".other.prepare-zzz"
    other.mkdir()
    live = tmp_path / ".data.prepare-live42"  # another prepare of the same destination, still running
    live.mkdir()
    import fcntl

    holder = open(tmp_path / ".data.prepare-live42.lock", "w")
    fcntl.flock(holder, fcntl.LOCK_EX)
    _, log = _run(_cfg(pref), out)
    holder.close()
    assert not stale.exists() and other.exists() and live.exists()
    assert any(f"removed {stale}, left by an interrupted prepare" in x for x in log)
    assert (out / "manifest.json").exists()


def test_text_sentencepiece_cannot_train_on_is_one_sentence_naming_the_line(tmp_path):
    """A file with old Mac line ends (\\r alone: the whole file one line), or lines all longer than SentencePiece
    takes: one sentence naming the file, the line and the fix, and no dataset left behind."""
    cr = tmp_path / "cr"
    cr.mkdir()
    (cr / "train.en").write_bytes(b"a b c\rd e f\rg h\r")
    (cr / "train.de").write_bytes(b"x y\rz w\rq\r")
    with pytest.raises(CorpusError, match=r"train.en, line 1: the whole file is one line holding carriage returns"):
        _run(_cfg(str(cr / "train")), tmp_path / "d1")
    long_ = _corpus(tmp_path / "long", "train", ["word " * 1000] * 5, ["wort " * 1000] * 5)
    with pytest.raises(CorpusError, match=r"learned no pieces .* longer than 4,192 bytes, and the longest here \(line "
                                          r"1\) has 4,999: give one sentence per line"):
        _run(_cfg(long_), tmp_path / "d2")
    assert not (tmp_path / "d1").exists() and not (tmp_path / "d2").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".d")]  # no half-built directory
