"""Parses made beforehand (`structnmt parse`) translate exactly as spaCy's own, also where spaCy is missing."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from structnmt.cli import main
from structnmt.cli.training import train
from structnmt.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig
from structnmt.data.prepare import PrepareConfig, prepare
from structnmt.decode.translate import Translator
from structnmt.errors import UserError
from structnmt.syntax import parsers
from structnmt.syntax.batching import StructureSpec
from structnmt.syntax.parse_cache import (
    ParseCacheError,
    ParseCacheIndex,
    cached_parses,
    read_parse_cache,
    settings_key,
    write_parse_cache,
)
from structnmt.syntax.parsers import ParserConfig, ParserError, build_parser

WHO = ["A man", "The little girl", "Two dogs", "A woman in a red coat", "The old fisherman", "Three children"]
DOES = ["is riding a bike", "plays with a ball", "walks along the beach", "is reading a newspaper"]
WHERE = ["in the park.", "near the river.", "at night.", "on a sunny day."]
EN = [f"{a} {b} {c}" for a, b, c in itertools.islice(itertools.product(WHO, DOES, WHERE), 60)]
DE = [f"wort{i % 7} satz{i % 5} ende." for i in range(len(EN))]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A model that reads dependency trees, trained 3 updates on a spaCy-parsed dataset."""
    root = tmp_path_factory.mktemp("parse_cache")
    for lang, lines in (("en", EN), ("de", DE)):
        (root / f"train.{lang}").write_text("".join(x + "\n" for x in lines))
    prepare(PrepareConfig(source_lang="en", target_lang="de", trainpref=str(root / "train"), vocab_size=120,
                          parser=ParserConfig(name="spacy")), root / "bin", progress=False, log=lambda *_: None)
    cfg = Config(data=DataConfig(path=str(root / "bin"), max_tokens=600, structures={"dep": StructureSpec("dep_mask")}),
                 model=ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1),
                 train=TrainConfig(save_dir=str(root / "model"), max_updates=3, validate_interval_updates=3,
                                   tensorboard=False, progress=False),
                 decode=DecodeConfig(beam=2, max_len_b=5))
    train(cfg, log=lambda *_: None)
    return root


def _texts(out) -> list[str]:
    return [h[0].text for h in out]


def test_a_cache_round_trip_gives_the_parsers_own_trees(tmp_path):
    cfg = ParserConfig(name="spacy")
    lines = ["A man is riding a bike in the park.", "  Two dogs play.  ", "", "A man is riding a bike in the park."]
    assert write_parse_cache(cfg, lines, tmp_path / "p.jsonl.gz") == 2  # distinct stripped non-empty lines
    with gzip.open(tmp_path / "p.jsonl.gz", "rt") as f:
        assert len(f.read().splitlines()) == 2
    got = cached_parses(read_parse_cache(tmp_path / "p.jsonl.gz"), "p", cfg, ["Two dogs play.", lines[0]])
    want = list(build_parser(cfg).parse(iter(["Two dogs play.", lines[0]])))
    assert got == want  # dependency, constituency and character spans alike
    # another conversion style gives other constituency trees: the cache made with hybrid does not serve it
    with pytest.raises(ParseCacheError, match=r"p: 1 of the 1 lines to parse are not in it, or were parsed with other"):
        cached_parses(read_parse_cache(tmp_path / "p.jsonl.gz"), "p", ParserConfig(name="spacy", conversion_style="flat"),
                      ["Two dogs play."])
    assert settings_key(ParserConfig(name="spacy", n_process=4)) == settings_key(cfg)  # how it ran is not in the key


def test_a_bad_cache_line_is_one_sentence_naming_it(tmp_path):
    path = tmp_path / "p.jsonl"
    write_parse_cache(ParserConfig(name="spacy"), ["Two dogs play."], path)
    path.write_text(path.read_text() + '{"key": "x", "dependency": {"words": ["a"]}}\n')
    with pytest.raises(ParseCacheError, match=r"p.jsonl, line 2: not a parse of `structnmt parse`"):
        read_parse_cache(path)
    with pytest.raises(ParseCacheError, match="no such parse cache"):
        read_parse_cache(tmp_path / "missing.jsonl")


def test_translation_from_the_cache_equals_translation_with_spacy_also_without_spacy(model, tmp_path, monkeypatch,
                                                                                      capsys):
    src = ["A man walks along the beach at night.", "Three children play with a ball.", "", EN[5]]
    (tmp_path / "in.en").write_text("".join(x + "\n" for x in src))
    live = _texts(Translator(model / "model" / "checkpoint_last.pt").translate(src))
    assert main(["parse", "--data", str(model / "bin"), "--input", str(tmp_path / "in.en"), "--out",
                 str(tmp_path / "p.jsonl")]) == 0
    assert "3 distinct lines of 1 file(s)" in capsys.readouterr().out
    monkeypatch.setattr(parsers, "resolve_pipeline", lambda name: None)  # spaCy's pipeline is missing from here on
    with pytest.raises(ParserError, match="is not installed"):
        Translator(model / "model" / "checkpoint_last.pt").translate(src)
    cached = Translator(model / "model" / "checkpoint_last.pt", parse_cache=tmp_path / "p.jsonl")
    assert _texts(cached.translate(src)) == live
    with pytest.raises(ParseCacheError, match=r"1 of the 1 lines to parse are not in it.*'Two dogs swim.'"):
        cached.translate(["Two dogs swim."])
    assert main(["translate", "--checkpoint", str(model / "model" / "checkpoint_last.pt"), "--input",
                 str(tmp_path / "in.en"), "--output", str(tmp_path / "out.de"), "--beam", "2",
                 "--parse-cache", str(tmp_path / "p.jsonl"), "--workers", "1"]) == 0
    assert (tmp_path / "out.de").read_text().splitlines() == live


def test_parse_never_writes_over_its_input_or_a_file_it_did_not_write(model, tmp_path, capsys):
    inp, notes, cache = tmp_path / "in.en", tmp_path / "notes.jsonl", tmp_path / "p.jsonl"
    inp.write_text("Two dogs play.\n")
    notes.write_text("my notes\n")
    (tmp_path / "link.jsonl").symlink_to(inp)
    parse = ["parse", "--data", str(model / "bin"), "--input", str(inp), "--no-progress", "--out"]
    for out, fragment in ((inp, "is an input file"), (tmp_path / "link.jsonl", "is an input file"),
                          (notes, "is not a file `structnmt parse` wrote")):
        assert main([*parse, str(out)]) == 2
        err = capsys.readouterr().err
        assert fragment in err and "Traceback" not in err
    assert inp.read_text() == "Two dogs play.\n" and notes.read_text() == "my notes\n"
    assert main([*parse, str(cache)]) == 0 and main([*parse, str(cache)]) == 0  # its own cache is replaced
    assert len(read_parse_cache(cache)) == 1


def test_parse_refuses_a_dataset_whose_parses_come_from_files(tmp_path, capsys):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "manifest.json").write_text(json.dumps({"config": {"parser": {"name": "synthetic"}}}))
    (tmp_path / "in.txt").write_text("a b\n")
    assert main(["parse", "--data", str(tmp_path / "bin"), "--input", str(tmp_path / "in.txt"), "--out",
                 str(tmp_path / "p.jsonl")]) == 2
    assert "its parser is 'synthetic', not spacy" in capsys.readouterr().err
    assert not (tmp_path / "p.jsonl").exists()


def test_parse_cache_bad_input_through_the_cli(model, tmp_path, capsys):
    (tmp_path / "in.en").write_text("Two dogs play.\n")
    assert main(["parse", "--data", str(tmp_path / "nothing"), "--input", str(tmp_path / "in.en"), "--out",
                 str(tmp_path / "p.jsonl")]) == 2
    assert "no prepared dataset there (no manifest.json)" in capsys.readouterr().err
    ckpt = str(model / "model" / "checkpoint_last.pt")
    assert main(["translate", "--checkpoint", ckpt, "--input", str(tmp_path / "in.en"), "--parse-cache",
                 str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: no such parse cache; make it with `structnmt parse" in capsys.readouterr().err
    # a model that reads no parses would ignore the cache: refused, not ignored
    cfg = Config(data=DataConfig(path=str(model / "bin"), max_tokens=600),
                 model=ModelConfig(d_model=32, ffn_dim=64, heads=4, encoder_layers=1, decoder_layers=1),
                 train=TrainConfig(save_dir=str(tmp_path / "plain"), max_updates=1, validate_interval_updates=1,
                                   tensorboard=False, progress=False))
    train(cfg, log=lambda *_: None)
    write_parse_cache(ParserConfig(name="spacy"), ["Two dogs play."], tmp_path / "p.jsonl")
    assert main(["translate", "--checkpoint", str(tmp_path / "plain" / "checkpoint_last.pt"), "--input",
                 str(tmp_path / "in.en"), "--parse-cache", str(tmp_path / "p.jsonl")]) == 2
    assert "reads no parses (its attention uses no structure), so the parses would be ignored; drop --parse-cache" \
        in capsys.readouterr().err



def _stopping_at_third_parse():
    """SpacyParser.parse as it is, but its third call is interrupted (Ctrl-C) as a user would."""
    real, calls = parsers.SpacyParser.parse, {"n": 0}

    def stopping(self, texts, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, texts, **kw)

    return stopping


def test_parse_streams_in_chunks_and_resume_finishes_an_interrupted_run(tmp_path, monkeypatch):
    """Chunks of 4 lines: a line repeated in a later chunk is written once; a run stopped in its third chunk
    keeps two chunks (whole gzip members) and --resume ends with the same parses as one run."""
    cfg = ParserConfig(name="spacy")
    lines = EN[:10] + ["", EN[0], "  " + EN[3] + " "] + EN[10:14]
    one = tmp_path / "one.jsonl.gz"
    assert write_parse_cache(cfg, lines, one, chunk_lines=4) == 14
    assert write_parse_cache(cfg, lines, tmp_path / "whole.jsonl.gz") == 14
    assert read_parse_cache(one) == read_parse_cache(tmp_path / "whole.jsonl.gz")
    with gzip.open(one, "rt") as f:
        assert len(f.read().splitlines()) == 14
    stopping = _stopping_at_third_parse()

    out = tmp_path / "out.jsonl.gz"
    with monkeypatch.context() as m:
        m.setattr(parsers.SpacyParser, "parse", stopping)
        with pytest.raises(KeyboardInterrupt):
            write_parse_cache(cfg, lines, out, chunk_lines=4, input_name="in")
    partial = tmp_path / "out.jsonl.gz.partial"
    with gzip.open(partial, "rt") as f:
        assert len(f.read().splitlines()) == 8  # two chunks of 4 distinct lines
    with pytest.raises(UserError, match="an interrupted `structnmt parse` is there; add --resume"):
        write_parse_cache(cfg, lines, out, chunk_lines=4, input_name="in")
    with pytest.raises(UserError, match="other settings \\(chunk_lines\\)"):
        write_parse_cache(cfg, lines, out, chunk_lines=5, input_name="in", resume=True)
    assert write_parse_cache(cfg, lines, out, chunk_lines=4, input_name="in", resume=True) == 14
    assert read_parse_cache(out) == read_parse_cache(one) and not partial.exists()


def test_parse_resume_refuses_a_record_whose_counts_or_notes_were_edited(tmp_path, monkeypatch):
    """A parse cache holds one parse per distinct line: a record saying fewer input lines are done than the
    .partial file has parses (its hash made to match) is refused, as are notes, which parse keeps none of."""
    import hashlib

    cfg = ParserConfig(name="spacy")
    stopping = _stopping_at_third_parse()

    out = tmp_path / "out.jsonl"
    with monkeypatch.context() as m:
        m.setattr(parsers.SpacyParser, "parse", stopping)
        with pytest.raises(KeyboardInterrupt):
            write_parse_cache(cfg, EN[:12], out, chunk_lines=4, input_name="in")
    record = tmp_path / "out.jsonl.partial.json"
    text = record.read_text()
    edited = {**json.loads(text), "input_lines": 4,
              "input_sha256": hashlib.sha256("".join(x + "\n" for x in EN[:4]).encode()).hexdigest()}
    record.write_text(json.dumps(edited))
    with pytest.raises(UserError, match=r"out.jsonl.partial.json: not a record .* \(input_lines 4, but the .* hold 8 "
                                        r"parses, more than one per input line\); remove it and out.jsonl.partial"):
        write_parse_cache(cfg, EN[:12], out, chunk_lines=4, input_name="in", resume=True)
    record.write_text(json.dumps({**json.loads(text), "notes": {"too_long": []}}))
    with pytest.raises(UserError, match=r"notes \{\"too_long\": \[\]\}: `structnmt parse` keeps none"):
        write_parse_cache(cfg, EN[:12], out, chunk_lines=4, input_name="in", resume=True)
    record.write_text(text)
    assert write_parse_cache(cfg, EN[:12], out, chunk_lines=4, input_name="in", resume=True) == 12


def test_parse_into_a_device_writes_in_place_and_is_not_resumed(tmp_path):
    cfg = ParserConfig(name="spacy")
    assert write_parse_cache(cfg, EN[:5] + EN[:2], "/dev/null", chunk_lines=2) == 5
    assert Path("/dev/null").is_char_device() and not Path("/dev/null.partial").exists()
    with pytest.raises(UserError, match="/dev/null is a device or a pipe, written as it goes"):
        write_parse_cache(cfg, EN[:5], "/dev/null", resume=True)


def test_the_index_reads_parts_on_demand_and_equals_the_whole_cache(tmp_path, monkeypatch):
    cfg = ParserConfig(name="spacy")
    for name in ("p.jsonl.gz", "p.jsonl"):
        write_parse_cache(cfg, EN[:12], tmp_path / name, chunk_lines=5)  # gzip: 3 members
        whole = read_parse_cache(tmp_path / name)
        monkeypatch.setattr(ParseCacheIndex, "BLOCK_LINES", 4)  # plain: 3 blocks
        index = ParseCacheIndex(tmp_path / name)
        assert len(index.parts) == 3 and len(index) == 12 and set(index) == set(whole)
        assert all(index[k] == whole[k] for k in reversed(list(whole)))  # any order, two parts kept at a time
        assert len(index._kept) <= ParseCacheIndex.MEMBERS_KEPT
    lines = (tmp_path / "p.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "bad.jsonl").write_text("".join(lines[:7]) + lines[7][:70] + "\n" + "".join(lines[8:]))
    bad = ParseCacheIndex(tmp_path / "bad.jsonl")
    key = json.loads(lines[7])["key"]
    with pytest.raises(ParseCacheError, match=r"bad.jsonl, line 8: not a parse of `structnmt parse`"):
        bad[key]
    (tmp_path / "nokey.jsonl").write_text("".join(lines[:2]) + "{}\n")
    with pytest.raises(ParseCacheError, match=r"nokey.jsonl, line 3: not a parse of `structnmt parse` \(no key"):
        ParseCacheIndex(tmp_path / "nokey.jsonl")
    raw = (tmp_path / "p.jsonl.gz").read_bytes()
    (tmp_path / "cut.jsonl.gz").write_bytes(raw[: len(raw) - 30])
    with pytest.raises(ParseCacheError, match="cut.jsonl.gz: the gzip data is damaged or truncated"):
        ParseCacheIndex(tmp_path / "cut.jsonl.gz")


def test_parse_resume_through_the_command_line(model, tmp_path, capsys):
    (tmp_path / "in.en").write_text("".join(x + "\n" for x in EN[:6]))
    parse = ["parse", "--data", str(model / "bin"), "--input", str(tmp_path / "in.en"), "--no-progress", "--out",
             str(tmp_path / "p.jsonl")]
    assert main([*parse, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "--resume:" in err and "no interrupted run writing" in err and "Traceback" not in err
    assert not (tmp_path / "p.jsonl").exists() and not (tmp_path / "p.jsonl.partial").exists()
    assert main(parse) == 0 and len(read_parse_cache(tmp_path / "p.jsonl")) == 6
