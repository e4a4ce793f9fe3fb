"""What a plain install gives: every module of the package imports, and so does every third-party module any
command reaches (the backends of optional commands included), in the environment the README's install line
made. `.ci/run` builds that environment afresh on every run, so a dependency that stops arriving (compare-mt
0.2.10 imports `six` without declaring it; python-dateutil 4.0 stopped bringing it along) fails here, by name,
the day it happens, rather than in a user's first `structnmt compare`."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import structnmt

SRC = Path(structnmt.__file__).resolve().parent


def _package_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(structnmt.__path__, "structnmt."))


def _third_party_imports() -> list[tuple[str, tuple[str, ...]]]:
    """Every absolute import of a module outside the standard library and the package, in any function:
    (module, names taken from it) for ``from module import names``, (module, ()) for ``import module``."""
    found: set[tuple[str, tuple[str, ...]]] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update((a.name, ()) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add((node.module, tuple(a.name for a in node.names)))
    return sorted((m, names) for m, names in found
                  if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "structnmt")


def test_the_scan_sees_the_backends_of_optional_commands():
    """The scan below would prove nothing if it missed the lazily imported backends."""
    modules = {m for m, _ in _third_party_imports()}
    for backend in ("compare_mt.bucketers", "ctranslate2", "HanTa", "spacy", "deepsig", "subword_nmt.learn_bpe",
                    "sacremoses", "torch.utils.tensorboard"):
        assert backend in modules, backend


@pytest.mark.parametrize("name", _package_modules())
def test_every_module_of_the_package_imports(name):
    importlib.import_module(name)


@pytest.mark.parametrize("module,names", _third_party_imports(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_third_party_module_a_command_reaches_imports(module, names):
    """Imported as the package's own code imports it (``from module import name``: the name must be there)."""
    mod = importlib.import_module(module)
    for name in names:
        if not hasattr(mod, name):
            importlib.import_module(f"{module}.{name}")  # a submodule


def test_the_english_pipeline_and_the_browser_driver_bindings_are_installed():
    """The dev extra's spaCy pipeline (what `--parser spacy` loads) and Selenium (the HTML report's browser
    tests) come with the README's install line."""
    from structnmt.syntax.parsers import resolve_pipeline

    pipeline = resolve_pipeline("en_core_web_sm")
    assert pipeline is not None
    importlib.import_module(pipeline)
    importlib.import_module("selenium.webdriver")


def test_property_tests_do_not_depend_on_the_machine_s_speed():
    """Every Hypothesis test runs under the suite's profile: no deadline, no "input generation is slow"."""
    from hypothesis import HealthCheck, settings

    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check
