"""Names that come from data (manifest entries, grid and tag row names) never lead outside their directory, and
two names on one directory are refused (issue: paths from data escaped their directory)."""

from __future__ import annotations

import json

import pytest

from structnmt.config import ConfigError
from structnmt.errors import UserError
from structnmt.fileio.files import (
    MANIFEST,
    OutputDir,
    check_component,
    check_distinct,
    is_inside_name,
)


def test_inside_names():
    assert is_inside_name("a.png") and is_inside_name("runs/a/seed1/test.hyp")
    for bad in ("", "../x", "a/../../x", "/etc/passwd", "a\\..\\x", "a\0b", None, 3, ["x"]):
        assert not is_inside_name(bad), bad
    assert check_component("transformer", "row") == "transformer"
    for bad in ("../escape", "/abs/path", "a/b", "..", ".", ""):
        with pytest.raises(UserError, match="cannot be a name inside the output directory"):
            check_component(bad, "row")
    with pytest.raises(UserError, match="'a b' and 'a_b' would share the directory 'a_b'"):
        check_distinct({"a b": "a_b", "a_b": "a_b"}, "rows")


def test_a_manifest_entry_outside_its_directory_is_refused_never_followed(tmp_path):
    victim = tmp_path / "victim" / "thesis.induced.conllu"
    victim.parent.mkdir()
    victim.write_text("my thesis\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"files": ["../victim/thesis.induced.conllu"],
                                            "commands": {"../victim/thesis.induced.conllu": "induce"}}))
    with pytest.raises(UserError, match=r"lists '../victim/thesis.induced.conllu', a path outside"):
        OutputDir(out, "induce")
    assert victim.read_text(encoding="utf-8") == "my thesis\n"


def test_removal_matches_whole_names_not_patterns_across_a_slash(tmp_path):
    out = OutputDir(tmp_path / "o", "induce")
    out.write_text("sent1_tree.png", "x")
    out.write_text("keep.md", "y")
    (tmp_path / "o" / "sub").mkdir()
    (tmp_path / "o" / "sub" / "sent2_tree.png").write_text("z")
    out.record("sub/sent2_tree.png")  # a name with a directory in it (recorded as its own)
    gone = out.remove_earlier(("sent*_tree.png",), keep=[])
    assert gone == ["sent1_tree.png"]  # '*' does not cross the '/'
    assert (tmp_path / "o" / "sub" / "sent2_tree.png").exists() and (tmp_path / "o" / "keep.md").exists()


def test_grid_rows_sharing_a_run_directory_are_refused(tmp_path):
    from structnmt.experiment import load_grid

    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\ndata: {path: d}\nbudget: {max_updates: 5}\nseeds: [1]\nbaseline: a b\nruns:\n"
                    "  - name: a b\n  - name: a_b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"runs 'a b' and 'a_b' would share the run directory runs/a-b"):
        load_grid(grid)


@pytest.mark.parametrize("name", ["../escape", "/abs/path"])
def test_a_tag_row_name_cannot_leave_the_output_directory(tmp_path, name):
    from structnmt.tasks.tagger import row_dir

    with pytest.raises(UserError, match="cannot be a name inside the output directory"):
        row_dir(tmp_path / "out", name)
    assert not (tmp_path / "escape").exists()


# --------------------------------------------------------------------------- the same through the command line


def test_through_the_cli_a_tag_row_cannot_escape_and_rows_cannot_share_a_directory(tmp_path, capsys):
    from conftest import assert_user_error, cli
    from test_tagger import tag_config

    victim = tmp_path / "escape" / "result.json"
    for rows, fragment in (("rows:\n  - name: ../escape\n", "cannot be a name inside the output directory"),
                           ("rows:\n  - name: a b\n  - name: a_b\n", "would share the directory 'a_b'")):
        cfg = tag_config(tmp_path, extra=rows)
        code, _, err = cli(capsys, "tag", cfg)
        assert_user_error(code, err, fragment)
    assert not victim.exists() and not (tmp_path / "out" / "a_b").exists()


def test_through_the_cli_a_manifest_pointing_outside_is_refused_and_the_victim_kept(tmp_path, capsys):
    from conftest import assert_user_error, cli

    victim = tmp_path / "victim" / "thesis.induced.conllu"
    victim.parent.mkdir()
    victim.write_text("my thesis\n")
    out = tmp_path / "trees"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"files": ["../victim/thesis.induced.conllu"]}))
    conllu = tmp_path / "g.conllu"
    conllu.write_text("1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n\n")
    code, _, err = cli(capsys, "induce", "--checkpoint", tmp_path / "none.pt", "--conllu", conllu, "--out", out)
    assert_user_error(code, err, "a path outside")
    assert victim.read_text() == "my thesis\n"


def test_through_the_cli_grid_rows_sharing_a_directory(tmp_path, capsys):
    from conftest import assert_user_error, cli

    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\ndata: {path: d}\nbudget: {max_updates: 5}\nseeds: [1]\nbaseline: a b\nruns:\n"
                    "  - name: a b\n  - name: a_b\n", encoding="utf-8")
    code, _, err = cli(capsys, "experiment", grid, "--out", tmp_path / "out")
    assert_user_error(code, err, "would share the run directory runs/a-b")
    assert not (tmp_path / "out").exists()
