"""Mechanisms and structure features from outside the package: ``--user-dir`` and entry points.

A plugin is Python code that registers what it adds when it is imported
(``@register_attention("name")`` on a :class:`~structnmt.nn.attention.Mechanism`,
``register_feature(Feature(...))``); see docs/extending.md. structnmt imports plugins from
two places:

* ``--user-dir DIR`` (every command; fairseq's convention; may be given several times): a
  directory with an ``__init__.py`` is imported as a package (its ``__init__.py`` and what it imports,
  its modules may import each other relatively), a directory without one has each of its ``*.py``
  files imported, in name order, except test files (``test_*.py``, ``*_test.py``, ``conftest.py``:
  pytest's names, so that a plugin's tests may live beside it), and a ``.py`` file is imported on its own. Every plugin module is imported under a private name
  (``structnmt_user_...``), never its own: a plugin directory called ``json`` or ``torch`` cannot
  replace the module of that name. An empty ``--user-dir ''`` (an unset shell variable) is refused:
  it would import every ``.py`` file of the current directory. The directories are
  kept in the environment variable ``STRUCTNMT_USER_DIRS`` (``os.pathsep``-separated), so
  every process a command starts (the experiment runner's trainings, torchrun's workers,
  translate's decoding processes) imports them too.
* the ``structnmt.plugins`` entry-point group of installed distributions
  (``[project.entry-points."structnmt.plugins"] name = "package.module"``): each is imported.

Both are imported by :func:`load_plugins`, which the command line calls before a command
runs and the registries call when a name is not found, so a plugin reaches every process
without code of its own. A name a plugin registers is recorded with the checkpoints it
trains; loading such a checkpoint without the plugin says which ``--user-dir`` it needs.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
import traceback
from importlib.metadata import entry_points
from pathlib import Path

from .errors import UserError

ENV = "STRUCTNMT_USER_DIRS"
ENTRY_POINT_GROUP = "structnmt.plugins"

#: what has been imported in this process: resolved user paths and entry-point names
_loaded: set[str] = set()


def user_dirs() -> list[str]:
    """The plugin paths of this process and its children (``STRUCTNMT_USER_DIRS``), in order."""
    return [p for p in os.environ.get(ENV, "").split(os.pathsep) if p]


def add_user_dirs(paths: list[str]) -> None:
    """Add ``paths`` (``--user-dir``) to :data:`ENV` (checked: each must exist) and import them."""
    known = user_dirs()
    for p in paths:
        if not p.strip():
            what = "an empty path" if not p else "a path of only blanks"
            raise UserError(f"--user-dir {p!r}: {what} (an unset shell variable?) would import every .py file of "
                            "the current directory; give the directory or .py file of your plugin.")
        path = Path(p).expanduser().resolve()
        if not path.exists():
            raise UserError(f"--user-dir {p}: no such file or directory; give the directory (or .py file) that "
                            "holds your mechanisms and features.")
        if not (path.is_dir() or path.suffix == ".py"):
            raise UserError(f"--user-dir {p}: neither a directory nor a .py file.")
        if str(path) not in known:
            known.append(str(path))
    os.environ[ENV] = os.pathsep.join(known)
    load_plugins()


def load_plugins() -> None:
    """Import every plugin not imported yet: the ``STRUCTNMT_USER_DIRS`` paths, then the entry points."""
    for p in user_dirs():
        if p not in _loaded:
            _loaded.add(p)
            _import_path(Path(p))

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        key = f"entry point {ep.name} = {ep.value}"
        if key not in _loaded:
            _loaded.add(key)
            ep.load()


def loaded() -> list[str]:
    """The user paths imported in this process (recorded with a checkpoint)."""
    return [p for p in user_dirs() if p in _loaded]


def _private_name(path: Path) -> str:
    """The module name a plugin file or package is imported under: private to structnmt, and distinct for two
    plugins of one name in different places."""

    tag = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    return f"structnmt_user_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{tag}"


def _import_path(path: Path) -> None:
    if not path.exists():
        raise UserError(f"{ENV}: {path} does not exist (a --user-dir given to the command that started this one).")
    if path.is_file():
        _import_file(path, _private_name(path))
    elif (path / "__init__.py").is_file():
        # a private name, so that a plugin package called like a module in use (json, yaml) replaces nothing
        _import_file(path / "__init__.py", _private_name(path), package=True)
    else:
        for file in sorted(path.glob("*.py")):
            if not is_test_file(file):
                _import_file(file, _private_name(file))


def is_test_file(file: Path) -> bool:
    """A test module by pytest's names (``test_*.py``, ``*_test.py``) or a ``conftest.py``: a ``--user-dir``
    directory's own tests, which it does not import (they would register the plugin's names a second time)."""
    name = file.name
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def _import_file(file: Path, name: str, package: bool = False) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        name, file, submodule_search_locations=[str(file.parent)] if package else None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        del sys.modules[name]
        raise UserError(f"--user-dir: {err.filename or file}, line {err.lineno}: {err.msg}; fix the plugin's "
                        "syntax.") from err
    except Exception as err:  # the plugin's own code failed while it was imported: where, and what
        del sys.modules[name]
        raise UserError(f"--user-dir: importing {file} failed{_where_in(err, file)}: {type(err).__name__}: {err} "
                        "(--debug shows the traceback).") from err
    except BaseException:
        del sys.modules[name]
        raise


def _where_in(err: BaseException, file: Path) -> str:
    """', line N' of the last frame of ``err``'s traceback inside ``file`` ('' when none is)."""

    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__) if Path(f.filename) == file]
    return f" at line {lines[-1]}" if lines else ""
