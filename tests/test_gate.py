"""structnmt gate: SA-NMT's gate analysis (section 5, eq. 23)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from structnmt.analysis.gate import (
    STTS_TO_UPOS,
    SentenceGates,
    chi2_sf,
    forced_gates,
    frequency_test,
    piece_tokens,
    run_gate,
    summarise,
    token_gates,
)
from structnmt.config import Config, DataConfig, DecodeConfig, ModelConfig, RNNConfig, TrainConfig
from structnmt.errors import UserError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_pieces_become_tokens_at_spaces_and_around_punctuation():
    pieces = ["▁Ein", "▁Mann", "▁fähr", "t", "▁über", "▁die", "▁Straße", ".", "▁„", "Hallo", "“", "▁", "5"]
    groups = piece_tokens(pieces)
    assert [g[0] for g in groups] == ["Ein", "Mann", "fährt", "über", "die", "Straße", ".", "„", "Hallo", "“", "5"]
    assert groups[2][1] == [2, 3] and groups[6][1] == [7] and groups[10][1] == [12]
    z = [0.1 * i for i in range(len(pieces))]
    assert token_gates(z, groups, "max")[2] == pytest.approx(0.3)
    assert token_gates(z, groups, "first")[2] == pytest.approx(0.2)
    with pytest.raises(ValueError):
        token_gates(z, groups, "mean")


def test_chi2_survival_function_matches_known_quantiles():
    assert chi2_sf(3.841459, 1) == pytest.approx(0.05, abs=1e-5)
    assert chi2_sf(5.991465, 2) == pytest.approx(0.05, abs=1e-5)
    assert chi2_sf(23.20925, 10) == pytest.approx(0.01, abs=1e-5)
    assert chi2_sf(0.0, 3) == 1.0


def test_frequency_test_merges_small_categories_and_computes_pearson():
    observed = {"VERB": 30, "NOUN": 10, "DET": 9, "INTJ": 1}
    expected = {"VERB": 10.0, "NOUN": 20.0, "DET": 18.0, "INTJ": 2.0}
    t = frequency_test(observed, expected)
    assert t["merged_into_other"] == ["INTJ"] and t["dof"] == 3
    want = (30 - 10) ** 2 / 10 + (10 - 20) ** 2 / 20 + (9 - 18) ** 2 / 18 + (1 - 2) ** 2 / 2
    assert t["chi2"] == pytest.approx(want)
    assert t["p"] < 1e-6


def test_summarise_counts_the_highest_token_against_per_sentence_frequencies():
    s1 = SentenceGates(1, ["Ein", "Mann", "läuft", "."], ["DET", "NOUN", "VERB", "PUNCT"], [1.0, 2.0, 3.0, 1.5], 0.5)
    s2 = SentenceGates(2, ["Kinder", "spielen"], ["NOUN", "VERB"], [2.5, 2.0], 0.7)
    s = summarise([s1, s2, SentenceGates(3, [], [], [], 0.9)])
    assert s["sentences"] == 2  # the empty one is not a sentence of the statistics
    assert s["highest_pos"] == {"VERB": 1, "NOUN": 1}
    assert s["expected_pos"]["NOUN"] == pytest.approx(0.25 + 0.5)
    assert s["expected_pos"]["DET"] == pytest.approx(0.25)
    assert s["mean_z_by_pos"]["</s>"]["mean"] == pytest.approx(0.6)
    assert s["mean_z_by_pos"]["VERB"]["mean"] == pytest.approx(2.5)


def test_stts_tags_map_to_upos_through_hanta():
    from structnmt.analysis.gate import _Tagger  # hanta is a dev dependency

    tagger = _Tagger("hanta")
    tags = tagger("Er ist nach Hause gegangen und kann nicht kommen .".split())
    assert tags == ["PRON", "AUX", "ADP", "NOUN", "VERB", "CCONJ", "AUX", "PART", "VERB", "PUNCT"]
    # "$(" is punctuation (not "$" once parentheses are stripped); HanTa's NNA ("das Blaue") a noun
    tags = tagger("Ein Mann ( links ) sieht das Blaue .".split())
    assert (tags[2], tags[4], tags[7]) == ("PUNCT", "PUNCT", "NOUN")
    assert not tagger.unmapped
    assert set(STTS_TO_UPOS.values()) <= {"ADJ", "ADV", "ADP", "DET", "NUM", "X", "INTJ", "SCONJ", "CCONJ", "NOUN",
                                          "PROPN", "PRON", "PART", "VERB", "AUX", "PUNCT"}


def _sa_model(seed=0, syntax="sa"):
    from structnmt.models import build_model

    torch.manual_seed(seed)
    m = build_model(ModelConfig(family="rnn", d_model=32, encoder_layers=1, decoder_layers=2, dropout=0.0,
                                rnn=RNNConfig(syntax=syntax, annotations="shared")), 40, 40)
    return m.eval()


def test_forced_gates_equal_the_gates_of_step_by_step_decoding_and_ignore_padding():
    """z_t of a teacher-forced pass is the gate of the search's own steps (the state that
    predicts piece t reads only earlier pieces), batched and padded or one by one."""
    from structnmt.data.vocab import BOS, EOS
    from structnmt.nn.attention import IncrementalCache

    model = _sa_model()
    g = torch.Generator().manual_seed(1)
    sources = [torch.randint(4, 40, (n,), generator=g).tolist() + [EOS] for n in (3, 7, 5)]
    targets = [torch.randint(4, 40, (n,), generator=g).tolist() for n in (4, 2, 6)]
    batched = forced_gates(model, sources, targets, "cpu", batch_size=3)
    alone = [forced_gates(model, [s], [t], "cpu")[0] for s, t in zip(sources, targets)]
    for b, a, t in zip(batched, alone, targets):
        assert len(b) == len(t) + 1
        assert b == pytest.approx(a, abs=1e-5)
    # step by step with the decoder cache, as beam search runs it
    src = torch.tensor([sources[2]])
    with torch.no_grad():
        enc = model.encode(src, src != 0, None, False)
        cache = IncrementalCache()
        steps = []
        prev = [BOS] + targets[2]
        for t in range(len(prev)):
            out = model.decode(torch.tensor([[prev[t]]]), enc, cache=cache, offset=t, need_weights=True)
            steps.append(float(out.attentions["syntax_gate"][0, 0]))
    assert steps == pytest.approx(batched[2], abs=1e-5)
    with pytest.raises(UserError, match="no syntactic gate"):  # the plain RNN has none
        forced_gates(_sa_model(syntax="none"), sources, targets, "cpu")


@pytest.fixture(scope="module")
def sa_checkpoint(synth_data, tmp_path_factory) -> Path:
    from structnmt.cli.training import train

    root = tmp_path_factory.mktemp("gate")
    model = ModelConfig(family="rnn", d_model=32, encoder_layers=1, decoder_layers=1,
                        rnn=RNNConfig(syntax="sa", annotations="shared"))
    cfg = Config(data=DataConfig(path=str(synth_data), max_tokens=800), model=model,
                 train=TrainConfig(save_dir=str(root / "sa"), max_updates=4, validate_interval_updates=4, lr=0.001,
                                   warmup_updates=0, tensorboard=False, progress=False),
                 decode=DecodeConfig(beam=2, max_len_b=5))
    train(cfg, log=lambda *_: None)
    return root / "sa" / "checkpoint_last.pt"


def _lines(synth_data: Path, split: str, n: int) -> list[str]:
    return (synth_data / f"{split}.src.txt").read_text().splitlines()[:n]


def test_gate_command_end_to_end(sa_checkpoint, synth_data, tmp_path):
    src = _lines(synth_data, "valid", 6)
    refs = (synth_data / "valid.ref.txt").read_text().splitlines()[:6]
    src.insert(2, "")  # an empty line: counted, not analysed
    refs.insert(2, "")
    (tmp_path / "in.txt").write_text("\n".join(src) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    from structnmt.cli import main

    assert main(["gate", "--checkpoint", str(sa_checkpoint), "--input", str(tmp_path / "in.txt"), "--reference",
                 str(tmp_path / "ref.txt"), "--out", str(tmp_path / "out"), "--pos", "none", "--beam", "2",
                 "--draw", "3", "--no-progress"]) == 0
    info = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert info["skipped"]["empty_input"] == [3]
    ref = info["sides"]["reference"]
    assert ref["sentences"] == 6 and sum(ref["highest_pos"].values()) == 6  # one highest token per sentence
    beam = info["sides"]["beam"]
    assert beam["sentences"] + len(info["skipped"]["empty_beam_output"]) == 6
    assert "</s>" in ref["mean_z_by_pos"]
    rows = (tmp_path / "out" / "gate_tokens.tsv").read_text().splitlines()
    assert rows[0].split("\t") == ["side", "line", "index", "token", "pos", "z"]
    assert sum(1 for r in rows if r.startswith("reference\t") and "\t</s>\t" in r) == 6
    assert "3" not in {r.split("\t")[1] for r in rows[1:]}  # the empty line has no rows
    for name in ("gate_sentences.png", "gate_pos.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == PNG_MAGIC
    assert "chi-squared" in (tmp_path / "out" / "gate.md").read_text()
    # a second run replaces the files it wrote; a file of the user's under one of its names is refused first
    first = (tmp_path / "out" / "gate.json").read_text()
    assert main(["gate", "--checkpoint", str(sa_checkpoint), "--input", str(tmp_path / "in.txt"), "--out",
                 str(tmp_path / "out"), "--pos", "none", "--beam", "2", "--draw", "0", "--no-progress"]) == 0
    assert (tmp_path / "out" / "gate.json").read_text() != first  # no references this time
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "gate.md").write_text("my notes\n")
    with pytest.raises(UserError, match=r"mine/gate\.md: exists and was not written by a structnmt command"):
        run_gate(checkpoint=tmp_path / "not-loaded.pt", input_path=tmp_path / "in.txt", out_dir=tmp_path / "mine",
                 pos="none")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["gate.md"]
    assert (tmp_path / "mine" / "gate.md").read_text() == "my notes\n"


def test_gate_refuses_misaligned_references_and_unknown_taggers(sa_checkpoint, synth_data, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(_lines(synth_data, "valid", 3)) + "\n")
    (tmp_path / "ref.txt").write_text("one\ntwo\n")
    with pytest.raises(UserError, match="2 lines, but .* has 3"):
        run_gate(checkpoint=sa_checkpoint, input_path=tmp_path / "in.txt", reference_path=tmp_path / "ref.txt",
                 out_dir=tmp_path / "o", pos="none")
    with pytest.raises(UserError, match="--pos"):
        run_gate(checkpoint=sa_checkpoint, input_path=tmp_path / "in.txt", out_dir=tmp_path / "o", pos="tnt")
    assert not (tmp_path / "o").exists()  # nothing written before the input is checked


def test_english_targets_are_tagged_by_a_spacy_pipeline_on_the_given_tokens():
    from structnmt.analysis.gate import _Tagger

    tags = _Tagger("spacy:en_core_web_sm")(["The", "dog", "runs", "home", "."])
    assert len(tags) == 5 and tags[0] == "DET" and tags[1] == "NOUN" and tags[2] == "VERB" and tags[4] == "PUNCT"
    with pytest.raises(UserError, match="not installed"):
        _Tagger("spacy:xx_no_such_pipeline")


def test_gate_bad_input_through_the_cli_is_one_sentence(sa_checkpoint, synth_data, tmp_path, capsys):
    from structnmt.cli import main

    (tmp_path / "in.txt").write_text("\n".join(_lines(synth_data, "valid", 3)) + "\n")
    (tmp_path / "ref.txt").write_text("one\n")
    code = main(["gate", "--checkpoint", str(sa_checkpoint), "--input", str(tmp_path / "in.txt"), "--reference",
                 str(tmp_path / "ref.txt"), "--out", str(tmp_path / "o"), "--pos", "none", "--no-progress"])
    err = capsys.readouterr().err
    assert code != 0 and "1 lines, but" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
