"""`structnmt compare --html --checkpoint SYSTEM=CKPT`: the attention maps per layer and head and the induced
trees of the chosen sentences, as numbers (against `analyze`'s own pass and `induce`'s own trees) and in
Debian's headless Chromium (the `browser` fixture of test_compare_html)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import assert_user_error, cli
from selenium.webdriver.support.ui import Select
from test_compare import degrade
from test_compare_html import browser  # noqa: F401 (the fixture)

from structnmt.analysis.compare import CompareConfig, System
from structnmt.analysis.compare_report import CompareInputs, run
from structnmt.cli.compare_attention import attention_payload, decode_map, encode_map

LINES = 12


@pytest.fixture(scope="module")
def models(synth_data, tmp_path_factory) -> dict[str, Path]:
    """Two tiny checkpoints on the synthetic data: a Transformer and an SA-NMT RNN (a tree-inducing model)."""
    from structnmt.cli.training import train
    from structnmt.config import Config, DataConfig, ModelConfig, RNNConfig, TrainConfig

    root = tmp_path_factory.mktemp("compare_attention")
    out = {}
    for name, model in (("transformer", ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=2,
                                                     decoder_layers=2)),
                        ("sa-nmt", ModelConfig(family="rnn", d_model=16, encoder_layers=1, decoder_layers=1,
                                               dropout=0.0, rnn=RNNConfig(syntax="sa")))):
        cfg = Config(data=DataConfig(path=str(synth_data), max_tokens=600), model=model,
                     train=TrainConfig(save_dir=str(root / name), max_updates=2, validate_interval_updates=2,
                                       warmup_updates=0, tensorboard=False, progress=False))
        train(cfg, log=lambda *_: None)
        out[name] = root / name / "checkpoint_last.pt"
    return out


def texts(synth_data: Path) -> tuple[list[str], list[str]]:
    src = (synth_data / "test.src.txt").read_text(encoding="utf-8").splitlines()[:LINES]
    ref = (synth_data / "test.ref.txt").read_text(encoding="utf-8").splitlines()[:LINES]
    return src, ref


def test_a_map_travels_as_one_byte_per_weight():
    rng = np.random.default_rng(0)
    w = rng.dirichlet(np.ones(7), size=(3, 5))  # (H, R, K), rows sum to 1
    entry = encode_map(w)
    assert (entry["heads"], entry["rows"], entry["cols"]) == (3, 5, 7)
    assert np.abs(decode_map(entry) - w).max() <= 1 / 510 + 1e-12
    assert decode_map(encode_map(np.array([[[0.0, 1.0]]]))).tolist() == [[[0.0, 1.0]]]
    with pytest.raises(ValueError, match="heads, rows, keys"):
        encode_map(w[0])


def test_the_maps_are_analyze_s_maps_and_the_tree_is_induce_s_tree(synth_data, models, tmp_path):
    from structnmt.analysis.heatmaps import sentence_maps
    from structnmt.decode.translate import Translator
    from structnmt.tasks.induce import read_words, run_induce

    sources, _ = texts(synth_data)
    lines = [0, 3, 5]
    payload = attention_payload({"T": str(models["transformer"]), "S": str(models["sa-nmt"])}, sources, lines)
    assert payload["lines"] == lines and set(payload["systems"]) == {"T", "S"}
    t = payload["systems"]["T"]
    assert not t["induces_trees"] and sorted(t["sentences"]) == ["0", "3", "5"]
    direct = sentence_maps(Translator(models["transformer"]), sources, lines)
    for i, m in zip(lines, direct):
        e = t["sentences"][str(i)]
        assert len(e["encoder_self"]) == 2 and len(e["cross"]) == 2  # every layer
        assert e["src"] == m.src_labels and e["tgt"] == m.tgt_labels and "induced" not in e
        for got, want in zip(e["encoder_self"] + e["cross"], m.encoder_self + m.cross):
            w = decode_map(got)
            assert w.shape == want.shape and w.shape[0] == 4  # heads
            assert np.abs(w - want).max() <= 1 / 510 + 1e-9
            assert len(got["keys"]) == w.shape[2]
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=w.shape[2] / 510)  # each query's weights
        assert e["encoder_self"][0]["rows"] == len(m.src_labels)
        assert e["cross"][0]["rows"] == len(m.tgt_labels)
    # the SA-NMT model: its RNN attention, and per sentence the tree `structnmt induce` writes for it
    s = payload["systems"]["S"]
    assert s["induces_trees"]
    gold = tmp_path / "words.conllu"
    gold.write_text("".join("".join(f"{k}\t{w}\t_\t_\t_\t_\t_\t_\t_\t_\n" for k, w in enumerate(sources[i].split(), 1))
                            + "\n" for i in lines), encoding="utf-8")
    run_induce(checkpoint=models["sa-nmt"], conllu=gold, out_dir=tmp_path / "induced")
    induced = read_words(tmp_path / "induced" / "words.induced.conllu")
    for i, tree in zip(lines, induced):
        e = s["sentences"][str(i)]
        assert e["induced"]["words"] == sources[i].split()
        assert e["induced"]["heads"] == tree.heads
        assert e["encoder_self"] == [] and len(e["cross"]) == 1


def test_a_line_longer_than_the_model_s_positions_has_no_maps_and_is_said(synth_data, models):
    sources, _ = texts(synth_data)
    long_line = " ".join([sources[0]] * 40)
    said: list[str] = []
    payload = attention_payload({"T": str(models["transformer"])}, [long_line, sources[1]], [0, 1], log=said.append)
    assert sorted(payload["systems"]["T"]["sentences"]) == ["1"]
    assert len(said) == 1 and "line 1 is longer than T's model.max_positions" in said[0]


@pytest.fixture(scope="module")
def report(synth_data, models, tmp_path_factory) -> Path:
    sources, refs = texts(synth_data)
    systems = [System("T", [[degrade(r, k) for r in refs] for k in (0, 1)]),
               System("S", [[(r if i % 2 else degrade(r, k)) for i, r in enumerate(refs)] for k in (0, 1)])]
    out = tmp_path_factory.mktemp("att_html")
    cfg = CompareConfig(metric="bleu", n_samples=30, length_cutoffs=[10], min_bucket=2, attention_lines=[1, 4])
    ckpts = {"T": str(models["transformer"]), "S": str(models["sa-nmt"])}
    run(CompareInputs(sources, refs, systems), cfg, out, html=True,
        attention=lambda lines: attention_payload(ckpts, sources, lines))
    return out


def test_choosing_a_sentence_draws_every_head_of_the_chosen_layer(browser, report, synth_data):  # noqa: F811
    d = browser
    d.get((report / "report.html").as_uri())
    assert [e for e in d.get_log("browser") if e["level"] == "SEVERE"] == []
    Select(d.find_element("id", "kind-select")).select_by_value("sentences with attention maps")
    rows = d.find_elements("css selector", "#sentence-table tbody tr")
    assert sorted(int(r.get_attribute("data-line")) for r in rows) == [1, 4]  # the filter: exactly those lines
    row = next(r for r in rows if r.get_attribute("data-line") == "1")
    row.click()
    Select(d.find_element("id", "att-system")).select_by_value("T")
    heat = d.find_elements("css selector", "#att-maps svg.heat")
    assert len(heat) == 4 + 1  # every head and their mean
    n_src = len(texts(synth_data)[0][1].split())  # at least one piece per word, and </s>
    cells = d.find_elements("css selector", "#att-maps rect.cell")
    assert len(cells) % 5 == 0 and len(cells) // 5 >= (n_src + 1) ** 2
    Select(d.find_element("id", "att-layer")).select_by_value("1")
    assert len(d.find_elements("css selector", "#att-maps svg.heat")) == 5
    Select(d.find_element("id", "att-role")).select_by_value("cross")
    assert "cross L1 h1" in d.find_element("id", "att-maps").text  # another role starts at its first layer
    Select(d.find_element("id", "att-layer")).select_by_value("1")
    assert "cross L2 h1" in d.find_element("id", "att-maps").text
    # the tree-inducing system: its induced tree, one arc per word but the root
    Select(d.find_element("id", "att-system")).select_by_value("S")
    arcs = d.find_elements("css selector", "#induced-tree path.arc")
    assert len(arcs) == n_src - 1
    assert len(d.find_elements("css selector", "#att-maps svg.heat")) == 2  # the RNN's one attention and the mean
    # a sentence without maps says which lines have them
    Select(d.find_element("id", "kind-select")).select_by_value("all sentences")
    other = next(r for r in d.find_elements("css selector", "#sentence-table tbody tr")
                 if r.get_attribute("data-line") not in ("1", "4"))
    other.click()
    assert "computed for lines 2, 5 only" in d.find_element("id", "attention").text
    assert [e for e in d.get_log("browser") if e["level"] == "SEVERE"] == []


def test_checkpoint_options_are_sentences(capsys, synth_data, models, tmp_path):
    src, ref = synth_data / "test.src.txt", synth_data / "test.ref.txt"
    runs = []
    for k in range(4):  # four runs, each its own translation (compare counts a file given twice once)
        runs.append(tmp_path / f"run{k}.txt")
        runs[-1].write_text(ref.read_text(encoding="utf-8").replace("\n", f" w{k}\n", 1), encoding="utf-8")
    base = ["compare", "--src", src, "--ref", ref, "--hyp", *runs[:2], "--hyp", *runs[2:], "--name", "A", "--name", "B"]
    code, _, err = cli(capsys, *base, "--checkpoint", f"A={models['transformer']}", "--out", tmp_path / "o1")
    assert_user_error(code, err, "--checkpoint draws attention maps in the HTML report; add --html")
    code, _, err = cli(capsys, *base, "--html", "--checkpoint", "A", "--out", tmp_path / "o2")
    assert_user_error(code, err, "write it as SYSTEM=CHECKPOINT")
    code, _, err = cli(capsys, *base, "--html", "--checkpoint", f"C={models['transformer']}", "--out", tmp_path / "o3")
    assert_user_error(code, err, "no system is called 'C'", "'A', 'B'")
    code, _, err = cli(capsys, *base, "--html", "--checkpoint", "A=nowhere.pt", "--out", tmp_path / "o4")
    assert_user_error(code, err, "--checkpoint A=nowhere.pt: no such file")
    code, _, err = cli(capsys, *base, "--html", "--attention-lines", "100000", "--out", tmp_path / "o5")
    assert_user_error(code, err, "--attention-lines 100000", "lines 1 to 60")
    for k in (1, 3, 4, 5):
        assert not (tmp_path / f"o{k}").exists()  # refused before any file was written
    code, out, err = cli(capsys, *base, "--html", "--checkpoint", f"B={models['transformer']}",
                         "--attention-lines", "2", "--out", tmp_path / "ok")
    assert code == 0, err
    html = (tmp_path / "ok" / "report.html").read_text(encoding="utf-8")
    assert '"systems":{"B":{"checkpoint"' in html and '"lines":[1]' in html
