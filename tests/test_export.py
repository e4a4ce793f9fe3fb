"""CTranslate2 export: the exported model translates exactly like structnmt, and bad cases are refused."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from structnmt.cli import main
from structnmt.config import DecodeConfig
from structnmt.data.dataset import encode_sources
from structnmt.data.vocab import BOS, EOS
from structnmt.decode.translate import Translator
from structnmt.tasks.export import MARKER, CT2Translator, ExportError, export_ctranslate2, is_export


def _train(data, work, **model):
    cfg = {
        "data": {"path": str(data), "max_tokens": 600},
        "model": {"d_model": 32, "ffn_dim": 64, "heads": 4, "encoder_layers": 2, "decoder_layers": 2,
                  "dropout": 0.1, "max_positions": 64, **model},
        "train": {"save_dir": str(work / "run"), "lr": 0.003, "warmup_updates": 10, "max_updates": 2,
                  "save_interval_updates": 2, "validate_interval_updates": 2, "log_interval": 4,
                  "tensorboard": False, "progress": False, "seed": 3},
        "decode": {"beam": 3, "max_len_a": 1.0, "max_len_b": 4},
    }
    (work / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["train", str(work / "cfg.yaml"), "--no-progress"]) == 0
    return work / "run" / "checkpoint_last.pt"


def _with_likely_eos(ckpt, out, strength: float = 1.5):
    """The checkpoint with the final norm's bias along a unit vector u and the EOS output row = strength * u."""
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    m = state["model"]
    u = torch.nn.functional.normalize(torch.randn(32, generator=torch.Generator().manual_seed(0)), dim=0)
    last = max(int(k.split(".")[1]) for k in m if k.startswith("decoder_layers."))
    norm = "decoder_norm.bias" if "decoder_norm.bias" in m else f"decoder_layers.{last}.ffn_sub.norm.bias"
    m[norm] = 0.5 * u
    for key in ("output_proj.weight", "tgt_embed.weight", "src_embed.weight"):
        if key in m and m[key].data_ptr() == m["output_proj.weight"].data_ptr():  # the output row (and tied ones)
            m[key][EOS] = strength * u
    torch.save(state, out)
    return out


def _test_sources(data):
    corpus = data.parent / "corpus"
    return [line.rstrip("\n") for line in open(corpus / "test.src", encoding="utf-8")][:40]


@pytest.mark.parametrize(("model", "eos"), [({"pre_norm": True, "share_all_embeddings": True}, 2.5),
                                           ({"pre_norm": False, "tie_output": False, "activation": "gelu"}, 1.5)],
                         ids=["pre-norm-shared", "post-norm-gelu"])
def test_exported_model_scores_and_translates_like_structnmt(synth_data, tmp_path, model, eos):
    """An untrained model (2 updates) whose EOS logit is raised: varied translations, some ending before
    the length limit and some at it."""
    ckpt = _with_likely_eos(_train(synth_data, tmp_path, **model), tmp_path / "model.pt", eos)
    out = export_ctranslate2(ckpt, tmp_path / "ct2")
    assert (out / "model.bin").is_file() and (out / MARKER).is_file()
    lines = _test_sources(synth_data)
    ours = Translator(ckpt, device="cpu")
    theirs = CT2Translator(out)
    dcfg = DecodeConfig(beam=3, max_len_a=1.0, max_len_b=4, batch_size=1, lenpen=0.0)
    a = ours.translate(lines, dcfg)
    # 1. the same model: CTranslate2's per-token log-probabilities of random targets (EOS included) are ours
    sources = encode_sources(ours.src_vocab, lines)
    g = torch.Generator().manual_seed(0)
    targets = [torch.randint(4, len(ours.tgt_vocab), (int(torch.randint(1, 15, (1,), generator=g)),),
                             generator=g).tolist() for _ in sources]
    piece_s, piece_t = ours.src_vocab.sp.id_to_piece, ours.tgt_vocab.sp.id_to_piece
    scored = theirs.translator.score_batch([[piece_s(i) for i in s] for s in sources],
                                           [[piece_t(i) for i in t] for t in targets], max_input_length=0)
    model_ = ours.model
    for src, tgt, res in zip(sources, targets, scored):
        src_t = torch.tensor([src])
        tgt_in = torch.tensor([[BOS] + tgt])
        gold = torch.tensor(tgt + [EOS])
        with torch.no_grad():
            lp = torch.log_softmax(model_(src_t, torch.ones_like(src_t, dtype=torch.bool), tgt_in).logits[0], -1)
        mine = lp.gather(1, gold[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(res.log_probs), mine, atol=2e-4, rtol=1e-4)
    # 2. greedy search has no choice to make: every translation is the same, at the length limit too
    greedy = DecodeConfig(beam=1, max_len_a=1.0, max_len_b=4, batch_size=1)
    assert [h[0].text for h in ours.translate(lines, greedy)] == [h[0].text for h in theirs.translate(lines, greedy)]
    # 3. beam search: the two searches differ in details (structnmt, like fairseq, finalises EOS candidates
    # within the top `beam` of 2 x beam and continues with the best `beam` others; at the length limit it forces
    # EOS and counts its log-probability where CTranslate2 stops without it), so a few translations may differ;
    # where neither reaches the limit, nearly all are the same (on Multi30k: benchmarks/bench_decode.py)
    b = theirs.translate(lines, dcfg)
    limit = [int(dcfg.max_len_a * len(s) + dcfg.max_len_b) for s in sources]
    free = [i for i in range(len(lines)) if max(len(a[i][0].tokens), len(b[i][0].tokens)) + 1 < limit[i]]
    assert len(free) >= 10 and len({a[i][0].text for i in free}) >= 2  # ends at different lengths
    same = sum(a[i][0].text == b[i][0].text for i in free)
    assert same >= 0.8 * len(free), (same, len(free))


def test_translate_command_uses_an_export_and_export_refuses_what_it_cannot_do(synth_data, tmp_path, capsys):
    ckpt = _train(synth_data, tmp_path)
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(_test_sources(synth_data)[:10]) + "\n")
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "ct2")]) == 0
    for source, name in ((ckpt, "a.txt"), (tmp_path / "ct2", "b.txt")):
        assert main(["translate", "--checkpoint", str(source), "--input", str(inp), "--output", str(tmp_path / name),
                     "--greedy", "--batch-size", "1", "--no-progress"]) == 0
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
    capsys.readouterr()
    # a directory that is not an earlier export is not written into
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(mine)]) == 2
    err = capsys.readouterr().err
    assert "is not an earlier structnmt export" in err and "Traceback" not in err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep"
    # an earlier export is replaced: the files it wrote go (CTranslate2 would read a stale shared_vocabulary.json
    # before the source/target ones of a new export), a file the user put there stays
    ct2 = tmp_path / "ct2"
    meta = json.loads((ct2 / MARKER).read_text())
    assert "model.bin" in meta["files"] and "source.spm.model" in meta["files"]
    meta["files"].append("stale_vocabulary.json")
    (ct2 / MARKER).write_text(json.dumps(meta))
    (ct2 / "stale_vocabulary.json").write_text("[]")
    (ct2 / "my_notes.txt").write_text("keep")
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(ct2)]) == 0
    assert not (ct2 / "stale_vocabulary.json").exists() and (ct2 / "my_notes.txt").read_text() == "keep"
    assert "my_notes.txt" not in json.loads((ct2 / MARKER).read_text())["files"]
    capsys.readouterr()
    # a failure while writing a new export (a full disk) leaves the earlier one whole, and nothing half-written
    import errno

    import structnmt.tasks.export as export_mod

    before = {p.name: p.read_bytes() for p in ct2.iterdir()}

    def full_disk(d, *args):
        (d / "model.bin").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(d / "model.bin"))

    real_write = export_mod._write_export
    export_mod._write_export = full_disk
    try:
        assert main(["export", "--checkpoint", str(ckpt), "--out", str(ct2)]) == 2
    finally:
        export_mod._write_export = real_write
    assert "no space left on the device" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in ct2.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ct2")] == []
    # the export's description truncated, or its SentencePiece model swapped for another: refused, not
    # translated with the wrong pieces
    meta_text = (ct2 / MARKER).read_text()
    (ct2 / MARKER).write_text(meta_text[: len(meta_text) // 2])
    assert main(["translate", "--checkpoint", str(ct2), "--input", str(inp), "--output", str(tmp_path / "e.txt")]) == 2
    assert "not a readable structnmt export description" in capsys.readouterr().err
    (ct2 / MARKER).write_text(meta_text)
    swapped = json.loads(meta_text)
    swapped["source_sha256"] = "0" * 64  # as if source.spm.model were not the exported one
    (ct2 / MARKER).write_text(json.dumps(swapped))
    assert main(["translate", "--checkpoint", str(ct2), "--input", str(inp), "--output", str(tmp_path / "e.txt")]) == 2
    err = capsys.readouterr().err
    assert "source.spm.model: not the vocabulary model" in err and "Traceback" not in err
    assert not (tmp_path / "e.txt").exists()
    (ct2 / MARKER).write_text(meta_text)
    # the shortest limit (EOS forced at the first step) gives empty translations on both, not an error
    for source, name in ((ckpt, "c.txt"), (ct2, "d.txt")):
        assert main(["translate", "--checkpoint", str(source), "--input", str(inp), "--output", str(tmp_path / name),
                     "--max-len-a", "0", "--max-len-b", "1", "--no-progress"]) == 0
    assert (tmp_path / "c.txt").read_text() == (tmp_path / "d.txt").read_text() == "\n" * 10
    # a device name that is not one is refused, not ignored
    assert main(["translate", "--checkpoint", str(ct2), "--input", str(inp), "--device", "gpu0"]) == 2
    assert "--device gpu0: not a device" in capsys.readouterr().err
    # bfloat16 decoding of a model with a mechanism: one sentence through the command line, no traceback
    (tmp_path / "localness").mkdir()
    loc = _train(synth_data, tmp_path / "localness",
                 attention={"overrides": {"encoder_self.0": {"name": "localness", "options": {}}}})
    assert main(["translate", "--checkpoint", str(loc), "--input", str(inp), "--dtype", "bfloat16"]) == 2
    err = capsys.readouterr().err
    assert "decode.dtype=bfloat16: model.attention encoder_self.0 is localness" in err and "Traceback" not in err
    # --dtype belongs to structnmt's own decoder; an export keeps the number format it was exported with
    assert main(["translate", "--checkpoint", str(ct2), "--input", str(inp), "--dtype", "bfloat16"]) == 2
    assert "--dtype is for structnmt checkpoints" in capsys.readouterr().err


def test_a_structure_aware_model_is_not_exported(synth_data, tmp_path, capsys):
    ckpt = _train(synth_data, tmp_path, attention={"decoder_self": {"name": "rel_pos", "options": {}}})
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "ct2")]) == 2
    err = capsys.readouterr().err
    assert "decoder_self is rel_pos; only plain multi-head attention" in err and "Traceback" not in err
    assert not (tmp_path / "ct2").exists()
    with pytest.raises(ExportError, match="cannot be exported to CTranslate2"):
        export_ctranslate2(ckpt, tmp_path / "ct2")


def test_an_export_of_a_moses_model_tokenizes_and_detokenizes_like_structnmt(tmp_path):
    """`prepare --moses`: the export keeps each side's language, so CTranslate2 reads the same pieces and
    writes the same detokenized text (greedy search: no choice in which the two searches could differ)."""
    from structnmt.data.prepare import PrepareConfig, prepare

    words = "alpha beta gamma delta red cat dog sees the a big small".split()
    lines = [" ".join(words[(i * k) % len(words)] for k in range(1, 2 + i % 6)).capitalize() + ", ok." for i in range(120)]
    for side in ("en", "de"):
        (tmp_path / f"train.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    prepare(PrepareConfig(source_lang="en", target_lang="de", trainpref=str(tmp_path / "train"), vocab_size=60,
                          moses=True), tmp_path / "data", progress=False, log=lambda *_: None)
    ckpt = _with_likely_eos(_train(tmp_path / "data", tmp_path, share_all_embeddings=True), tmp_path / "m.pt")
    theirs = CT2Translator(export_ctranslate2(ckpt, tmp_path / "ct2"))
    ours = Translator(ckpt, device="cpu")
    assert (theirs.src_vocab.moses, theirs.tgt_vocab.moses) == ("en", "de") == (ours.src_vocab.moses,
                                                                                 ours.tgt_vocab.moses)
    sources = ["Alpha, beta.", 'The cat "sees" a dog.']
    # the same pieces in (tokenized), the same text out (detokenized)
    assert encode_sources(theirs.src_vocab, sources) == encode_sources(ours.src_vocab, sources)
    assert ours.src_vocab.encode_pieces(["Alpha, beta."])[0][-1] == "▁."
    pieces = ours.tgt_vocab.encode(["alpha, beta dog."])[0]
    assert ours.tgt_vocab.sp.decode(pieces) == "alpha , beta dog ."  # what the model writes, tokenized
    assert theirs.tgt_vocab.decode(pieces) == ours.tgt_vocab.decode(pieces) == "alpha, beta dog."
    greedy = DecodeConfig(beam=1, max_len_a=1.0, max_len_b=4, batch_size=1)
    assert [h[0].text for h in theirs.translate(sources, greedy)] == [h[0].text for h in ours.translate(sources, greedy)]


def test_an_export_of_a_subword_nmt_model_keeps_its_codes_and_translates_like_structnmt(tmp_path):
    """`prepare --subword subword-nmt`: the export carries the subword-nmt model (codes and pieces) as
    `{side}.bpe.model`, and CTranslate2 reads and writes the same pieces as structnmt."""
    from structnmt.data.prepare import PrepareConfig, prepare

    words = "alpha beta gamma delta red cat dog sees the a big small".split()
    lines = [" ".join(words[(i * k) % len(words)] for k in range(1, 2 + i % 6)) + " ." for i in range(120)]
    for side in ("en", "de"):
        (tmp_path / f"train.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    prepare(PrepareConfig(source_lang="en", target_lang="de", trainpref=str(tmp_path / "train"),
                          subword="subword-nmt", merges=20), tmp_path / "data", progress=False, log=lambda *_: None)
    ckpt = _with_likely_eos(_train(tmp_path / "data", tmp_path, share_all_embeddings=True), tmp_path / "m.pt")
    out = export_ctranslate2(ckpt, tmp_path / "ct2")
    assert (out / "source.bpe.model").is_file() and not (out / "source.spm.model").exists()
    theirs, ours = CT2Translator(out), Translator(ckpt, device="cpu")
    assert theirs.src_vocab.bpe is not None and theirs.src_vocab.sha256 == ours.src_vocab.sha256
    sources = ["alpha beta gammas .", "the big doggy sees a cat ."]
    assert encode_sources(theirs.src_vocab, sources) == encode_sources(ours.src_vocab, sources)
    greedy = DecodeConfig(beam=1, max_len_a=1.0, max_len_b=4, batch_size=1)
    assert [h[0].text for h in theirs.translate(sources, greedy)] == [h[0].text for h in ours.translate(sources, greedy)]
    from structnmt.data.vocab import train_subword_nmt

    other, _ = train_subword_nmt(lines, tmp_path / "other", merges=19)  # another model in its place: refused
    (out / "source.bpe.model").write_bytes(other.proto)
    with pytest.raises(ExportError, match=r"source\.bpe\.model: not the vocabulary model"):
        CT2Translator(out)


def test_translate_refuses_an_export_whose_files_were_edited_or_swapped(synth_data, tmp_path, capsys):
    """Every file an export wrote is hashed in its description: an edited shared_vocabulary.json (or model.bin, or
    one taken from another export) is one sentence, not changed translations."""
    ckpt = _train(synth_data, tmp_path)
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(_test_sources(synth_data)[:3]) + "\n")
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "ct2")]) == 0
    meta = json.loads((tmp_path / "ct2" / MARKER).read_text())
    assert set(meta["sha256"]) == set(meta["files"]) and "model.bin" in meta["sha256"]
    vocab = next(n for n in meta["files"] if n.endswith("vocabulary.json"))
    original = (tmp_path / "ct2" / vocab).read_text()
    words = json.loads(original)
    words[5], words[6] = words[6], words[5]
    (tmp_path / "ct2" / vocab).write_text(json.dumps(words))
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(tmp_path / "ct2"), "--input", str(inp), "--output",
                 str(tmp_path / "x.txt"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{vocab}: not the file" in err and "export the checkpoint again" in err and "Traceback" not in err
    assert not (tmp_path / "x.txt").exists()
    (tmp_path / "ct2" / vocab).write_text(original)
    assert main(["translate", "--checkpoint", str(tmp_path / "ct2"), "--input", str(inp), "--output",
                 str(tmp_path / "x.txt"), "--no-progress"]) == 0


def test_export_over_a_link_replaces_the_export_it_points_to_and_keeps_the_user_s_links(synth_data, tmp_path, capsys):
    ckpt = _train(synth_data, tmp_path)
    real = tmp_path / "exports" / "v1"
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(real)]) == 0
    link = tmp_path / "current"
    link.symlink_to(real)
    (tmp_path / "notes.txt").write_text("mine")
    (real / "notes_link.txt").symlink_to(tmp_path / "notes.txt")  # the user's link inside the export
    assert main(["export", "--checkpoint", str(ckpt), "--out", str(link)]) == 0
    assert link.is_symlink() and link.resolve() == real.resolve() and is_export(real)
    assert (real / "notes_link.txt").is_symlink() and (real / "notes_link.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "exports").iterdir()) == ["v1"]  # no old export left beside it
