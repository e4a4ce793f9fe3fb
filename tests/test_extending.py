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
