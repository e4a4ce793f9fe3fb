"""Structures end to end: parsed once in prepare, batched for training, parsed again in translate."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from structnmt.cli.training import train
from structnmt.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig
from structnmt.data.dataset import PreparedDataset, collate
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.data.synthetic import SynthConfig, write_corpus
from structnmt.decode.translate import Translator
from structnmt.syntax.batching import StructureSpec
from structnmt.syntax.parsers import ParserConfig

SPECS = {
    "wb": StructureSpec("word_boundaries"),
    "dep": StructureSpec("dep_mask"),
    "syn": StructureSpec("syntax_partition", {"K": 2}),
}


@pytest.fixture(scope="module")
def parsed_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("parsed")
    write_corpus(SynthConfig(seed=2, n_train=300, n_valid=20, n_test=20), root / "c")
    prepare(PrepareConfig(source_lang="src", target_lang="tgt", trainpref=str(root / "c" / "train"),
                          validpref=str(root / "c" / "valid"), testprefs=[str(root / "c" / "test")], vocab_size=300,
                          parser=ParserConfig(name="synthetic")), root / "bin", progress=False, log=lambda *_: None)
    return root


def _cfg(root: Path, data: Path, structures: dict) -> Config:
    return Config(
        data=DataConfig(path=str(data), max_tokens=800, structures=structures),
        model=ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1),
        train=TrainConfig(save_dir=str(root / "model"), max_updates=3, validate_interval_updates=3,
                          validate_bleu=True, tensorboard=False, progress=False),
        decode=DecodeConfig(beam=2),
    )


def test_batches_carry_the_requested_structures_only(parsed_data):
    ds = PreparedDataset(parsed_data / "bin")
    split = ds.split("train")
    labels = {x: i for i, x in enumerate(ds.manifest["syntax"]["labels"])}
    b = collate(split, [0, 5, 9], SPECS, labels)
    S = b.src.shape[1]
    assert set(b.structures) == {"wb", "dep", "syn", "syn.labels"}
    assert b.structures["wb"].shape == (3, S) and b.structures["dep"].shape == (3, S, S)
    # one word boundary per word plus EOS, for every sentence
    for row, i in enumerate([0, 5, 9]):
        dep, const = split.trees(i)
        assert int(b.structures["wb"][row].sum()) == len(dep.words) + 1
    assert int((b.structures["syn.labels"] >= 0).sum()) > 0
    assert collate(split, [0, 5]).structures == {}


def test_training_and_translation_with_structures(parsed_data):
    root = parsed_data
    state = train(_cfg(root, root / "bin", SPECS), log=lambda *_: None)
    assert state.num_updates == 3 and "bleu" in state.history[-1]
    tr = Translator(root / "model" / "checkpoint_last.pt",
                    parser_overrides={"dependency_file": str(root / "c" / "test.src.conllu"),
                                      "constituency_file": str(root / "c" / "test.src.tree")})
    lines = (root / "c" / "test.src").read_text().splitlines()
    out = tr.translate(lines)
    assert len(out) == len(lines)
    # the structures built at translation time equal those of the prepared test split
    parsed = tr._parse(lines)
    split = PreparedDataset(root / "bin").split("test")
    for i in (0, 7):
        (dep, const), wop = parsed[i]
        sdep, sconst = split.trees(i)
        assert dep.heads == sdep.heads and const == sconst
        assert torch.equal(torch.from_numpy(wop), torch.from_numpy(split.word_of_piece(i)))
    # one line whose pre-parsed tree does not fit its text: that line is empty, the others are translated
    bad = list(lines)
    bad[3] = "zz " * len(bad[3].split())
    out = tr.translate(bad)
    assert tr.unaligned == [4] and out[3][0].text == "" and out[3][0].score == float("-inf")
    assert all(out[i][0].score > float("-inf") for i in range(len(bad)) if i != 3)


def test_structures_without_trees_give_a_clear_error(synth_data, tmp_path):
    cfg = _cfg(tmp_path, synth_data, {"dep": StructureSpec("dep_mask")})
    with pytest.raises(ValueError, match="has no trees; prepare it with a parser"):
        train(cfg, log=lambda *_: None)


def test_tree_free_features_work_without_a_parser(synth_data):
    """n-gram partitions and word boundaries need no parse: words come from the pieces."""
    split = PreparedDataset(synth_data).split("train")
    assert not split.has_trees
    b = collate(split, [0, 1], {"ng": StructureSpec("ngram_partition", {"n": 2}), "wb": StructureSpec("word_boundaries")})
    pieces = [split.src_vocab.sp.id_to_piece(int(t)) for t in split.get("src", 0)]
    n_words = sum(p.startswith("\u2581") for p in pieces)
    assert int(b.structures["wb"][0].sum()) == n_words + 1  # + EOS
    assert int(b.structures["ng"][0].max()) == (n_words + 1) // 2  # EOS is a phrase of its own


def test_mechanisms_declare_the_structures_they_need(synth_data, tmp_path):
    """A mechanism's required_structures() reach the collator without any config entry."""
    from structnmt.config import AttentionSpec
    from structnmt.nn import ATTENTION_REGISTRY, MultiHeadAttention, register_attention

    seen = []

    class NeedsBoundaries(MultiHeadAttention):
        def required_structures(self):
            return {"wb": StructureSpec("word_boundaries")}

        def forward(self, query, memory, ctx):
            seen.append(tuple(ctx.structures["wb"].shape))
            return super().forward(query, memory, ctx)

    register_attention("_test_needs_wb")(NeedsBoundaries)
    try:
        cfg = _cfg(tmp_path, synth_data, {})
        cfg.model.attention.encoder_self = AttentionSpec(name="_test_needs_wb")
        cfg.train.validate_bleu = False
        train(cfg, log=lambda *_: None)
        assert seen and all(len(s) == 2 for s in seen)
    finally:
        ATTENTION_REGISTRY.pop("_test_needs_wb", None)


def test_translate_builds_tree_free_structures_without_a_parser(synth_data, tmp_path):
    """A model asking for n-gram partitions translates data prepared without a parser."""
    cfg = _cfg(tmp_path, synth_data, {"ng": StructureSpec("ngram_partition", {"n": 2})})
    cfg.train.validate_bleu = True
    state = train(cfg, log=lambda *_: None)
    assert "bleu" in state.history[-1]
    tr = Translator(tmp_path / "model" / "checkpoint_last.pt")
    lines = PreparedDataset(synth_data).split("test").text("src")[:4]
    assert len(tr.translate(lines)) == 4
    (_, _), wop = tr._parse(lines[:1])[0]
    assert int(wop.max()) + 1 == len(lines[0].split())


def test_translate_without_the_datasets_trees(parsed_data, tmp_path):
    """A model trained on pre-parsed trees translates new text: with tree-free features
    the words come from the pieces (and a note says so, and matches the trees' words on
    the synthetic corpus); a model whose features read trees asks for them by name."""
    from structnmt.syntax.parsers import ParserError

    root = parsed_data
    lines = (root / "c" / "test.src").read_text().splitlines()
    free = _cfg(tmp_path / "free", root / "bin", {"ng": StructureSpec("ngram_partition", {"n": 2})})
    train(free, log=lambda *_: None)
    tr = Translator(tmp_path / "free" / "model" / "checkpoint_last.pt")
    assert "read no trees" in tr.note
    without = tr.translate(lines)
    with_trees = tr.translate(lines, parse_prefix=str(root / "c" / "test"), parse_lang="src")
    assert [o[0].text for o in without] == [o[0].text for o in with_trees]
    needs = _cfg(tmp_path / "needs", root / "bin", {"dep": StructureSpec("dep_mask")})
    train(needs, log=lambda *_: None)
    tr = Translator(tmp_path / "needs" / "model" / "checkpoint_last.pt")
    assert tr.note == ""
    # it reads dependency trees only: only their file is asked for, and given alone it is enough
    with pytest.raises(ParserError, match=r"pass its trees with --parse-dependency FILE.conllu \(one tree") as err:
        tr.translate(lines)
    assert "--parse-constituency" not in str(err.value)
    by_prefix = tr.translate(lines, parse_prefix=str(root / "c" / "test"), parse_lang="src")
    only_dep = Translator(tmp_path / "needs" / "model" / "checkpoint_last.pt",
                          parser_overrides={"dependency_file": str(root / "c" / "test.src.conllu")})
    assert [o[0].text for o in only_dep.translate(lines)] == [o[0].text for o in by_prefix]
