"""The plugin tutorial (docs/extending.md) end to end: examples/tree_distance adds a structure feature
and a mechanism without editing the package; it trains in an experiment grid, translates and is
analysed with --user-dir, and without it the checkpoint names the directory it needs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "tree_distance"


def run(cwd: Path, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "STRUCTNMT_USER_DIRS"}
    return subprocess.run([sys.executable, "-m", "structnmt.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory) -> Path:
    """The tutorial's two-row grid on a small synthetic corpus, a few updates, one seed."""
    work = tmp_path_factory.mktemp("tutorial")
    done = run(work, "synth", "--out", "runs/synth", "--n-train", "200", "--n-valid", "12", "--n-test", "12")
    assert done.returncode == 0, done.stderr
    # --user-dir before the command (fairseq's place): the tests below read how the grid records it
    done = run(work, "--user-dir", PLUGIN, "experiment", PLUGIN / "grid.yaml", "budget.max_updates=6", "seeds=[1]",
               "train.validate_interval_updates=3", "train.save_interval_updates=3", "model.d_model=32",
               "model.ffn_dim=64", "train.progress=false")
    assert done.returncode == 0, done.stderr
    return work


def test_the_tutorial_grid_trains_the_plugin_mechanism_as_a_row(grid_run):
    report = (grid_run / "runs" / "experiments" / "tree_distance" / "results.md").read_text()
    assert "| Transformer |" in report and "| + tree distance (layer 1) |" in report
    run_dir = grid_run / "runs" / "experiments" / "tree_distance" / "runs" / "tree-distance-layer-1" / "seed1"
    resolved = (run_dir / "resolved.yaml").read_text()
    assert "tree_distance" in resolved
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("kind") == "valid" for r in metrics)


def _recorded_run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run a command as results.md records it (``VAR=value ... structnmt experiment ...``) from ``cwd``, with no
    plugin in the environment: only what the command names."""
    words = shlex.split(command)
    env = {k: v for k, v in os.environ.items() if k != "STRUCTNMT_USER_DIRS"}
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[:2] == ["structnmt", "experiment"], command
    return subprocess.run([sys.executable, "-m", "structnmt.cli", *words[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True)


def test_the_grid_s_record_keeps_user_dir_and_its_command_resumes_the_grid(grid_run):
    """results.md's command and training_commands.json name the plugin (relative to the grid's directory, as
    data paths are), every training command names it, and the recorded command resumes the grid, which the
    same command without --user-dir cannot."""
    out = grid_run / "runs" / "experiments" / "tree_distance"
    shown = Path(os.path.relpath(PLUGIN, grid_run)).as_posix()
    report = (out / "results.md").read_text()
    command = next(line for line in report.splitlines() if line.startswith("- **Command**: `"))
    command = command.removeprefix("- **Command**: `").split("`")[0]
    assert f" --user-dir {shown} " in f" {command} ", command
    assert json.loads((out / "training_commands.json").read_text()) == [command]
    run_dir = out / "runs" / "tree-distance-layer-1" / "seed1"
    launched = next(line for line in (run_dir / "train.log").read_text().splitlines() if line.startswith("$ "))
    assert shlex.split(launched)[-2:] == ["--user-dir", str(PLUGIN)]

    result = run_dir / "result.json"
    scored = json.loads(result.read_text())
    result.unlink()  # the run is decoded and scored again: its checkpoint needs the plugin
    without = shlex.join(w for w in shlex.split(command) if w not in ("--user-dir", shown))
    done = _recorded_run(without, grid_run)
    assert done.returncode == 2 and "tree_distance" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not result.exists()
    done = _recorded_run(command, grid_run)
    assert done.returncode == 0, done.stderr
    again = json.loads(result.read_text())
    assert again["bleu"] == scored["bleu"] and again["hyp_file"] == scored["hyp_file"]
    assert json.loads((out / "training_commands.json").read_text()).count(command) == 1  # the same command, once


def test_the_plugin_checkpoint_translates_and_is_analysed_with_the_same_user_dir(grid_run):
    ckpt = (grid_run / "runs" / "experiments" / "tree_distance" / "runs" / "tree-distance-layer-1" / "seed1"
            / "checkpoint_last.pt")
    test = grid_run / "runs" / "synth" / "test.src"
    trees = ["--parse-dependency", f"{test}.conllu"]
    done = run(grid_run, "translate", "--checkpoint", ckpt, "--input", test, "--output", "out.txt", "--user-dir",
               PLUGIN, *trees)
    assert done.returncode == 0, done.stderr
    assert len((grid_run / "out.txt").read_text().splitlines()) == 12
    done = run(grid_run, "translate", "--checkpoint", ckpt, "--input", test, *trees)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "unknown mechanism 'tree_distance'" in done.stderr and f"--user-dir {PLUGIN}: give the same" in done.stderr
    done = run(grid_run, "analyze", "--checkpoint", ckpt, "--input", test, "--out", "maps", "--sentences", "1",
               "--no-progress", "--user-dir", PLUGIN, *trees)
    assert done.returncode == 0, done.stderr
    assert (grid_run / "maps" / "sent1_encoder_self.png").read_bytes()[:4] == b"\x89PNG"


def test_user_dir_that_does_not_exist_is_one_sentence(tmp_path):
    done = run(tmp_path, "synth", "--out", "s", "--user-dir", tmp_path / "nowhere")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"--user-dir {tmp_path / 'nowhere'}: no such file or directory" in done.stderr
    assert not (tmp_path / "s").exists()


def test_a_plugin_that_fails_to_import_is_one_sentence_naming_its_file_and_line(tmp_path):
    (tmp_path / "broken.py").write_text("x = 1\ndef f(:\n    pass\n")
    done = run(tmp_path, "synth", "--out", "s", "--user-dir", tmp_path / "broken.py")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"--user-dir: {tmp_path / 'broken.py'}, line 2: invalid syntax" in done.stderr
    (tmp_path / "needs.py").write_text("import math\n\nimport no_such_module_here  # a dependency not installed\n")
    done = run(tmp_path, "synth", "--out", "s", "--user-dir", tmp_path / "needs.py")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert (f"--user-dir: importing {tmp_path / 'needs.py'} failed at line 3: ModuleNotFoundError: No module named "
            "'no_such_module_here'") in done.stderr
    debug = run(tmp_path, "synth", "--out", "s", "--user-dir", tmp_path / "needs.py", "--debug")
    assert "Traceback" in debug.stderr and "no_such_module_here" in debug.stderr  # --debug: the plugin's traceback
    assert not (tmp_path / "s").exists()


def test_tree_distance_feature_against_a_brute_force_path_length():
    """The plugin's feature: path lengths in the tree, clipped, pieces of one word at distance 0."""
    import importlib.util

    from structnmt.syntax.trees import DependencyTree

    spec = importlib.util.spec_from_file_location("tree_distance_under_test", PLUGIN / "tree_distance.py")
    module = importlib.util.module_from_spec(spec)
    from structnmt.nn.attention import ATTENTION_REGISTRY
    from structnmt.syntax.features import FEATURES

    saved = (ATTENTION_REGISTRY.pop("tree_distance", None), FEATURES.pop("tree_distance", None))
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        heads = [2, 3, 4, 5, 0, 5, 1]  # a chain under word 5 (the root), word 6 under it, word 7 under word 1
        tree = DependencyTree([f"w{i}" for i in range(7)], heads, ["dep"] * 7, ["X"] * 7)
        far = np.full((7, 7), 99)  # Floyd-Warshall over the undirected arcs
        np.fill_diagonal(far, 0)
        for dep, head in enumerate(heads):
            if head:
                far[dep, head - 1] = far[head - 1, dep] = 1
        for k in range(7):
            far = np.minimum(far, far[:, [k]] + far[[k], :])
        wop = np.array([0, 0, 1, 2, 3, 4, 5, 6])  # word 0 has two pieces
        for clip in (3, 8):
            d = module.tree_distances(wop, {"dependency": tree}, clip=clip)
            assert d.tolist() == np.minimum(far, clip)[np.ix_(wop, wop)].tolist()
        assert d[0, 1] == 0 and d.max() == 6  # one word's pieces; w7 (under w1) to w6 (under the root)
    finally:
        del sys.modules[spec.name]
        ATTENTION_REGISTRY.pop("tree_distance", None)
        FEATURES.pop("tree_distance", None)
        for registry, value in zip((ATTENTION_REGISTRY, FEATURES), saved):
            if value is not None:
                registry["tree_distance"] = value


def test_the_tutorial_s_contract_check_passes_for_the_plugin(tmp_path):
    """docs/extending.md, "Checking it": the one-line contract check on the tutorial's mechanism."""
    code = (f"from structnmt.plugins import add_user_dirs; add_user_dirs([{str(PLUGIN)!r}]); "
            "from structnmt.testing import check_mechanism; print(check_mechanism('tree_distance'))")
    env = {k: v for k, v in os.environ.items() if k != "STRUCTNMT_USER_DIRS"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "checked encoder_self (every layer)" in done.stdout  # the rule of its own options: encoder only
    assert "left out cross: model.attention (dec.0.cross) tree_distance: an encoder self-attention" in done.stdout


def test_an_empty_user_dir_is_refused_and_imports_nothing(tmp_path):
    """`--user-dir ''` (an unset shell variable in quotes) would import every .py file of the current directory."""
    marker = tmp_path / "RAN"
    (tmp_path / "setup.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n", encoding="utf-8")
    done = run(tmp_path, "score", "--hyp", "x", "--ref", "x", "--user-dir", "")
    assert done.returncode == 2 and "--user-dir '': an empty path" in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists()


def test_a_plugin_named_like_a_module_in_use_replaces_nothing(tmp_path):
    """A plugin package called `json` is imported under a private name: the standard library's json still works,
    and the plugin's mechanism is registered."""
    pkg = tmp_path / "json"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from structnmt.nn.attention import MultiHeadAttention, register_attention\n"
        "from .inner import VALUE\n"
        "@register_attention('json_plugin_mha')\nclass JsonPluginMHA(MultiHeadAttention):\n    pass\n",
        encoding="utf-8")
    (pkg / "inner.py").write_text("VALUE = 3\n", encoding="utf-8")
    code = (f"from structnmt.plugins import add_user_dirs; add_user_dirs([{str(pkg)!r}]); import json, sys; "
            "from structnmt.nn.attention import ATTENTION_REGISTRY; "
            "print(json.dumps({'ok': 'json_plugin_mha' in ATTENTION_REGISTRY}), "
            "sys.modules['json'].__file__.endswith('json/__init__.py') and 'python' in sys.modules['json'].__file__)")
    env = {k: v for k, v in os.environ.items() if k != "STRUCTNMT_USER_DIRS"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path.parent, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ['{"ok":', 'true}', "True"]


# --------------------------------------------------------------------------- a test file beside a plugin


def test_a_user_dir_imports_no_test_file_kept_beside_the_plugin(tmp_path):
    """`--user-dir DIR` (a folder without __init__.py) imports its plugin files, not the tests beside them: a test
    that imports the plugin would register its feature a second time ("Duplicate feature name")."""
    (tmp_path / "plug.py").write_text(
        "import numpy as np\nfrom structnmt.syntax.features import Feature, Padding, register_feature\n"
        "register_feature(Feature('beside_tests', lambda w, t: np.zeros(len(w)), (), (), 'zeros',\n"
        "                         Padding('sequence', np.float32, pad=0.0)))\n", encoding="utf-8")
    for name in ("test_plug.py", "plug_test.py", "conftest.py"):  # each would fail the import if it ran
        (tmp_path / name).write_text(f"import plug  # noqa\nraise SystemExit('{name} was imported')\n",
                                     encoding="utf-8")
    code = (f"from structnmt.plugins import add_user_dirs; add_user_dirs([{str(tmp_path)!r}]); "
            "from structnmt.syntax.features import FEATURES; print('beside_tests' in FEATURES)")
    env = {k: v for k, v in os.environ.items() if k != "STRUCTNMT_USER_DIRS"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path.parent, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split() == ["True"], done.stderr + done.stdout


# --------------------------------------------------------------------------- parent-scaled attention (PASCAL)

PASCAL = ROOT / "examples" / "parent_scaled"


@pytest.fixture
def pascal():
    """examples/parent_scaled/parent_scaled.py imported here, the registries restored afterwards."""
    import importlib.util

    from structnmt.nn.attention import ATTENTION_REGISTRY
    from structnmt.syntax.features import FEATURES

    saved = (ATTENTION_REGISTRY.pop("parent_scaled", None), FEATURES.pop("parent_position", None))
    spec = importlib.util.spec_from_file_location("parent_scaled_under_test", PASCAL / "parent_scaled.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]
        ATTENTION_REGISTRY.pop("parent_scaled", None)
        FEATURES.pop("parent_position", None)
        for registry, key, value in zip((ATTENTION_REGISTRY, FEATURES), ("parent_scaled", "parent_position"), saved):
            if value is not None:
                registry[key] = value


def pascal_tree():
    """'the big dog barked': the <- dog, big <- dog, dog <- barked, barked the root (heads 1-based, 0 = root)."""
    from structnmt.syntax.trees import DependencyTree

    return DependencyTree(["the", "big", "dog", "barked"], [3, 3, 4, 0], ["det", "amod", "nsubj", "root"],
                          ["DET", "ADJ", "NOUN", "VERB"])


def test_parent_position_is_the_middle_of_the_parent_word_s_pieces_and_a_float_feature_batches(pascal):
    from structnmt.syntax.batching import StructureSpec, build_structures

    wop = np.array([0, 1, 2, 2, 3, 3, 3])  # "dog" in pieces 2-3, "barked" in pieces 4-6
    got = pascal.parent_positions(wop, {"dependency": pascal_tree()})
    assert got.dtype == np.float32
    assert got.tolist() == [2.5, 2.5, 5.0, 5.0, 5.0, 5.0, 5.0]  # the root "barked" is its own parent
    batch = build_structures({"p": StructureSpec("parent_position")}, [(pascal_tree(), None)] * 2,
                             [wop, np.array([0, 1, 2, 3])], S=8)
    p = batch["p"]
    assert p.dtype == torch.float32 and p.shape == (2, 8)
    assert p[0].tolist() == got.tolist() + [-1.0]  # the pieces, then EOS (no parent); no BOS before them
    assert p[1].tolist() == [2.0, 2.0, 3.0, 3.0, -1.0, -1.0, -1.0, -1.0]  # EOS at 4, then padding


def test_parent_scaled_attention_keeps_the_contract(pascal):
    from structnmt.testing import check_mechanism

    for options in ({}, {"heads": 2, "sigma": 2.0}, {"where": "logits"}):
        report = check_mechanism("parent_scaled", options)
        assert report.checked == ["encoder_self (every layer)"] and not report.failures


def test_parent_scaled_attention_is_the_paper_s_product_in_float64(pascal):
    """Every head's weights times N(j; p_i, sigma^2), written out in float64: equal to 1e-12 (no float32 step)."""
    from structnmt.nn import (
        AttentionContext,
        AttentionDims,
        masked_softmax,
        merge_heads,
        split_heads,
    )
    from structnmt.syntax.batching import StructureSpec, build_structures

    D, H, sigma = 16, 2, 1.5
    dims = AttentionDims(D, H, 0.0, "encoder_self", "enc.0.self")
    torch.manual_seed(0)
    attn = pascal.ParentScaledAttention(dims=dims, options=pascal.ParentScaledAttention.Options(sigma=sigma))
    attn = attn.double().eval()
    wops = [np.array([0, 1, 2, 2, 3, 3, 3]), np.array([0, 1, 2, 3])]
    st = build_structures({"parent_position": StructureSpec("parent_position")}, [(pascal_tree(), None)] * 2, wops,
                          S=8)
    mask = torch.tensor([[True] * 8, [True] * 5 + [False] * 3])
    x = torch.randn(2, 8, D, dtype=torch.float64)
    out = attn(x, x, AttentionContext(key_mask=mask, structures=st, need_weights=True))
    q = split_heads(attn.q_proj(x), H)
    k, v = (split_heads(t, H) for t in attn.kv_proj(x).chunk(2, -1))
    w = masked_softmax(q @ k.transpose(-1, -2) / (D // H) ** 0.5, mask[:, None, None, :])
    p = st["parent_position"].double()
    p = torch.where(p >= 0, p, torch.arange(8.0, dtype=torch.float64))  # EOS and padding: themselves
    j = torch.arange(8.0, dtype=torch.float64)
    gauss = torch.exp(-((j[None, None] - p[:, :, None]) ** 2) / (2 * sigma**2)) / (2 * np.pi * sigma**2) ** 0.5
    want = w * gauss[:, None]
    torch.testing.assert_close(out.weights, want, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(out.output, attn.out_proj(merge_heads(want @ v)), atol=1e-12, rtol=1e-12)
    assert float(out.weights[1, :, :, 5:].detach().abs().sum()) == 0.0  # the padded keys stay at 0


def test_the_parent_scaled_plugin_trains_a_few_updates_and_translates(tmp_path):
    """docs/extending.md's parent-scaled example through the command line: its config trains with --user-dir, and
    the checkpoint translates new text with its dependency trees."""
    done = run(tmp_path, "synth", "--out", "runs/synth", "--n-train", "200", "--n-valid", "12", "--n-test", "12")
    assert done.returncode == 0, done.stderr
    done = run(tmp_path, "prepare", "-s", "src", "-t", "tgt", "--trainpref", "runs/synth/train", "--validpref",
               "runs/synth/valid", "--testpref", "runs/synth/test", "--destdir", "data-bin/synth_trees",
               "--vocab-size", "1000", "--parser", "synthetic")
    assert done.returncode == 0, done.stderr
    done = run(tmp_path, "train", PASCAL / "config.yaml", "--user-dir", PASCAL, "--no-progress",
               "train.max_updates=4", "train.validate_interval_updates=2", "train.save_interval_updates=2",
               "model.d_model=32", "model.ffn_dim=64")
    assert done.returncode == 0, done.stderr
    metrics = [json.loads(line) for line in (tmp_path / "runs" / "parent_scaled" / "metrics.jsonl").read_text()
               .splitlines()]
    assert any(r.get("kind") == "valid" for r in metrics)
    test = tmp_path / "runs" / "synth" / "test.src"
    done = run(tmp_path, "translate", "--checkpoint", "runs/parent_scaled/checkpoint_last.pt", "--input", test,
               "--output", "out.txt", "--parse-dependency", f"{test}.conllu", "--user-dir", PASCAL)
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 12


# --------------------------------------------------------------------------- the page's Python blocks


def doc_block(after: str) -> str:
    """The first ```python block of docs/extending.md after the text ``after``."""
    import re

    text = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", text.split(after, 1)[1], re.S).group(1)


def test_the_page_s_trees_in_a_test_example_runs():
    namespace: dict = {}
    exec(compile(doc_block("**Trees in a test.**"), "docs/extending.md", "exec"), namespace)
    assert namespace["mask"].shape == (7, 7)


def test_the_page_s_forward_of_your_own_keeps_the_contract():
    from structnmt.nn.attention import ATTENTION_REGISTRY
    from structnmt.testing import check_mechanism

    namespace: dict = {}
    try:
        exec(compile(doc_block("## 7. A forward of your own"), "docs/extending.md", "exec"), namespace)
        report = check_mechanism("gated_heads")
    finally:
        ATTENTION_REGISTRY.pop("gated_heads", None)
    assert len(report.checked) == 3 and not report.failures
