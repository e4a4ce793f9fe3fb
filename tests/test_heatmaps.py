"""structnmt analyze: attention heatmaps and statistics of a checkpoint with MG-SA in encoder layer 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structnmt.cli.training import train
from structnmt.config import (
    AttentionSpec,
    Config,
    DataConfig,
    DecodeConfig,
    ModelConfig,
    TrainConfig,
)
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.synthetic import SynthConfig, write_corpus
from structnmt.syntax.parsers import ParserConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GROUPS = [{"kind": "word", "heads": 1}, {"kind": "ngram", "heads": 1, "n": 2},
          {"kind": "syntax", "heads": 1, "level": 1}, {"kind": "syntax", "heads": 1, "level": 2}]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("heatmaps")
    write_corpus(SynthConfig(seed=4, n_train=200, n_valid=10, n_test=10), root / "c")
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "c" / "train"),
                          validpref=str(root / "c" / "valid"), testprefs=[str(root / "c" / "test")], vocab_size=200,
                          parser=ParserConfig(name="synthetic")), root / "bin", progress=False, log=lambda *_: None)
    model = ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2, decoder_layers=1)
    model.attention.overrides["encoder_self.0"] = AttentionSpec("mgsa", {"groups": GROUPS, "composition": "san"})
    cfg = Config(data=DataConfig(path=str(root / "bin"), max_tokens=800), model=model,
                 train=TrainConfig(save_dir=str(root / "model"), max_updates=4, validate_interval_updates=4,
                                   tensorboard=False, progress=False),
                 decode=DecodeConfig(beam=1, max_len_b=5))
    train(cfg, log=lambda *_: None)
    return root


def _short_input(root: Path, out: Path) -> tuple[Path, Path, Path]:
    """The two shortest test sentences with their pre-parsed trees (keeps the plots small)."""
    src = (root / "c" / "test.src").read_text().splitlines()
    trees = (root / "c" / "test.src.tree").read_text().splitlines()
    conllu = [b for b in (root / "c" / "test.src.conllu").read_text().split("\n\n") if b.strip()]
    assert len(src) == len(trees) == len(conllu)
    pick = sorted(range(len(src)), key=lambda i: len(src[i]))[:2]
    out.mkdir(parents=True, exist_ok=True)
    paths = out / "in.src", out / "in.src.conllu", out / "in.src.tree"
    paths[0].write_text("".join(src[i] + "\n" for i in pick))
    paths[1].write_text("".join(conllu[i].strip("\n") + "\n\n" for i in pick))
    paths[2].write_text("".join(trees[i] + "\n" for i in pick))
    return paths


def _run(root: Path, out: Path) -> list[Path]:
    from structnmt.analysis.heatmaps import run_analyze

    src, dep, const = _short_input(root, out.parent / "input")
    return run_analyze(checkpoint=root / "model" / "checkpoint_last.pt", input_path=src, out_dir=out, sentences=2,
                       parse_dependency=str(dep), parse_constituency=str(const))


def test_analyze_writes_heatmaps_and_stats(trained, tmp_path):
    written = _run(trained, tmp_path / "out")
    names = {p.name for p in written}
    for n in (1, 2):
        for stem in ("encoder_self", "mgsa_layer1_phrases", "cross_last"):
            assert f"sent{n}_{stem}.png" in names
    assert "sent1_mgsa_layer2_phrases.png" not in names  # layer 2 is plain attention
    for p in written:
        assert p.exists()
        if p.suffix == ".png":
            data = p.read_bytes()
            assert data[:8] == PNG_MAGIC and len(data) > 10_000, p.name
    stats = json.loads((tmp_path / "out" / "attention_stats.json").read_text())
    assert stats["sentences"] == 2
    enc = stats["encoder_self"]
    assert [e["layer"] for e in enc] == [1, 2]
    assert len(stats["decoder_self"]) == 1 and len(stats["cross"]) == 1
    assert enc[0]["mgsa"] and not enc[0]["after_mgsa"] and enc[1]["after_mgsa"] and not enc[1]["mgsa"]
    assert [g["kind"] for g in enc[0]["groups"]] == ["word", "ngram", "syntax", "syntax"]
    for e in enc + stats["decoder_self"]:
        assert len(e["entropy_per_head"]) == 4 and e["entropy"] >= 0
        assert 0.0 <= e["diagonal"] <= 1.0 and 0.0 <= e["adjacent"] <= 1.0
        assert e["local"] == pytest.approx(e["diagonal"] + e["adjacent"])
    # causal decoder self-attention: the first query attends only to itself
    assert stats["decoder_self"][0]["diagonal"] > 0


def test_analyze_replaces_its_own_files_and_refuses_a_users_file_before_loading_the_model(trained, tmp_path):
    from structnmt.analysis.heatmaps import run_analyze
    from structnmt.errors import UserError

    out = tmp_path / "out"
    src, dep, const = _short_input(trained, tmp_path / "input")
    for _ in range(2):  # statistics only (no pictures, quick); the second run replaces the first's file
        written = run_analyze(checkpoint=trained / "model" / "checkpoint_last.pt", input_path=src, out_dir=out,
                              sentences=0, stats_sentences=1, parse_dependency=str(dep), parse_constituency=str(const))
        assert [p.name for p in written] == ["attention_stats.json"]
    assert sorted(p.name for p in out.iterdir()) == [".structnmt-written.json", "attention_stats.json"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "attention_stats.json").write_text("{}\n")
    (tmp_path / "in.txt").write_text("a b c\n")
    with pytest.raises(UserError, match=r"attention_stats\.json: exists and was not written by a structnmt command"):
        run_analyze(checkpoint=tmp_path / "not-loaded.pt", input_path=tmp_path / "in.txt", out_dir=tmp_path / "mine")
    assert (tmp_path / "mine" / "attention_stats.json").read_text() == "{}\n"
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["attention_stats.json"]


def test_phrase_labels_name_the_tokens_of_each_phrase(trained):
    """The phrase tick labels cover every source piece exactly once, in order."""
    import torch

    from structnmt.analysis.heatmaps import _phrase_labels, _structures_for
    from structnmt.data.dataset import encode_sources
    from structnmt.decode.translate import Translator
    from structnmt.nn.mgsa import MGSAGroup

    root = trained
    tr = Translator(root / "model" / "checkpoint_last.pt",
                    parser_overrides={"dependency_file": str(root / "c" / "test.src.conllu"),
                                      "constituency_file": str(root / "c" / "test.src.tree")})
    texts = [x.strip() for x in (root / "c" / "test.src").read_text().splitlines() if x.strip()]
    src = encode_sources(tr.src_vocab, texts[:1])[0]
    (structures,) = _structures_for(tr, texts, [0], [len(src)])
    pieces = [tr.src_vocab.sp.id_to_piece(int(t)) for t in src[:-1]] + ["</s>"]
    for g in (MGSAGroup("ngram", 1, n=2), MGSAGroup("syntax", 1, level=1)):
        key = "mgsa.ngram2" if g.kind == "ngram" else "mgsa.syntax"
        ids = structures[key][0] if g.kind == "ngram" else structures[key][0, 0]
        M = int(ids.max()) + 1
        labels = _phrase_labels(g, structures, pieces, M, {i: x for x, i in tr.label_ids.items()})
        assert len(labels) == M
        words = [x.split(": ", 1)[-1] for x in labels]
        assert words[-1] == "</s>"  # EOS is a phrase of its own
        full = [w for w in words[:-1] if not w.endswith("..")]
        assert all(w in texts[0] for w in full)  # each phrase is a contiguous run of the sentence's words
    assert torch.is_tensor(structures["mgsa.syntax"])


def test_analyze_an_sa_nmt_model_draws_the_syntactic_gate(trained, tmp_path):
    """RNN family with structured attention: no encoder self-attention maps, the cross
    attention, and the eq. 23 gate norm per target token (picture and statistics)."""
    from structnmt.analysis.heatmaps import run_analyze
    from structnmt.config import RNNConfig

    model = ModelConfig(family="rnn", d_model=32, encoder_layers=1, decoder_layers=1,
                        rnn=RNNConfig(syntax="sa", annotations="shared"))
    cfg = Config(data=DataConfig(path=str(trained / "bin"), max_tokens=800), model=model,
                 train=TrainConfig(save_dir=str(tmp_path / "sa"), max_updates=4, validate_interval_updates=4,
                                   lr=0.001, warmup_updates=0, tensorboard=False, progress=False),
                 decode=DecodeConfig(beam=1, max_len_b=5))
    train(cfg, log=lambda *_: None)
    src, dep, const = _short_input(trained, tmp_path / "input")
    written = run_analyze(checkpoint=tmp_path / "sa" / "checkpoint_last.pt", input_path=src,
                          out_dir=tmp_path / "out", sentences=1, stats_sentences=2)
    names = {p.name for p in written}
    assert {"sent1_syntax_gate.png", "sent1_cross_last.png"} <= names and "sent2_syntax_gate.png" not in names
    assert (tmp_path / "out" / "sent1_syntax_gate.png").read_bytes()[:8] == PNG_MAGIC
    gate = json.loads((tmp_path / "out" / "attention_stats.json").read_text())["syntax_gate"]
    assert sum(gate["highest_in_sentence"].values()) == 2  # one highest token per analysed sentence
    assert 0 < gate["mean"] < 32 ** 0.5 and gate["eos_mean"] is not None


def test_statistics_read_the_token_queries_and_leave_phrase_rows_to_the_quadrants():
    """Entropy and locality average over the token rows only: a PhraseTransformer's hypernode rows (or an
    interleaved layer's phrase queries) have no position, so they must not count as adjacent tokens."""
    from types import SimpleNamespace

    import torch

    from structnmt.analysis.heatmaps import _Acc, _add_statistics

    S, P = 3, 2  # 3 source tokens, then 2 hypernode rows and keys
    w = torch.zeros(1, S + P, S + P)
    w[0, torch.arange(S), torch.arange(S)] = 1.0  # every token attends to itself: diagonal 1, entropy 0
    w[0, S, S - 1] = 1.0  # hypernode rows: all mass "next to" them (|i - j| = 1) ...
    w[0, S + 1, S] = 1.0
    tgt = torch.full((1, 2, 2), 0.5)  # 2 target tokens attending uniformly to both
    no_layout = SimpleNamespace(quadrant_layout=lambda: None)
    run = SimpleNamespace(acc=_Acc(), quad={}, mgsa_at=[False],
                          modules={"encoder_self": [no_layout], "decoder_self": [no_layout], "cross": []})
    s = SimpleNamespace(S=S, tgt_labels=["a", "</s>"], enc_outs=[],
                        res=SimpleNamespace(attentions={"encoder_self": [w[None]], "decoder_self": [tgt[None]]}))
    _add_statistics(run, s)
    assert run.acc.mean(("encoder_self", 0, "diagonal")) == pytest.approx(1.0)
    assert run.acc.mean(("encoder_self", 0, "adjacent")) == pytest.approx(0.0)  # ... which stays out of it
    assert run.acc.mean(("encoder_self", 0, "entropy_per_head")) == pytest.approx([0.0], abs=1e-9)
    assert run.acc.mean(("decoder_self", 0, "diagonal")) == pytest.approx(0.5)
    assert run.acc.mean(("decoder_self", 0, "entropy_per_head")) == pytest.approx([float(torch.log(torch.tensor(2.0)))])


def test_analyze_again_removes_its_own_earlier_pictures_only(trained, tmp_path):
    """A second analyze into the same directory (fewer sentences here) leaves none of the first's pictures beside
    its statistics; a file of the user's there stays."""
    from structnmt.analysis.heatmaps import run_analyze

    src, dep, const = _short_input(trained, tmp_path / "input")
    out = tmp_path / "out"
    kw = dict(checkpoint=trained / "model" / "checkpoint_last.pt", input_path=src, out_dir=out,
              parse_dependency=str(dep), parse_constituency=str(const))
    run_analyze(sentences=2, **kw)
    assert (out / "sent2_encoder_self.png").exists()
    (out / "my_notes.png").write_bytes(b"mine")
    written = run_analyze(sentences=1, **kw)
    assert not any(out.glob("sent2_*.png")) and (out / "sent1_encoder_self.png").exists()
    assert (out / "my_notes.png").read_bytes() == b"mine"
    assert {p.name for p in out.glob("*.png")} == {p.name for p in written if p.suffix == ".png"} | {"my_notes.png"}
