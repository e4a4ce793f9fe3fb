"""Feature stores: a structure feature computed once per dataset and read, memory-mapped, by every process.

``structnmt features`` computes a structure request (a feature of :data:`structnmt.syntax.features.FEATURES`
and its parameters) for every sentence of every split of a prepared dataset and writes it beside it::

    DATASET/features/<feature>.<param>=<value>.../     e.g. features/lpea_positions.k=2.rule=rule2/
        meta.json              what the store holds and what it was made from (:class:`StoreMeta`)
        <split>.<column>.*     the values, part by part (:mod:`structnmt.data.feature_columns`)

A store is built in a temporary directory beside it and renamed into place (:func:`build_store`); the
``features`` directory records what ``structnmt features`` wrote there (:class:`structnmt.fileio.files.OutputDir`),
so a directory of the user's under a store's name is never replaced.

A training reads a request from its store when there is one (:func:`open_store`, through
:meth:`structnmt.data.dataset.PreparedSplit.open_feature_stores`): the values are decoded from the mapped
files one batch at a time, so nothing is computed and nothing is kept per process, and every process of
a run (and every run on the dataset) shares the same page cache. A store is used only when it was made
for this dataset (:func:`dataset_identity`) by this version of the feature's code
(:func:`feature_code_version`); any other is refused in one sentence that names the fix.

A store records every column file's SHA-256 and size (``meta.json``'s ``files``) and is checked against them
when it is opened (:func:`check_files`: once per split a process opens, not per read), so a file changed or
damaged on disk (flipped bytes, a cut) is refused, naming it, instead of read as values. The cost is one
sequential read of the split's files at a training's start in each process: hashlib's SHA-256 measured 1.2 to
1.8 GB/s on one core of this project's AMD EPYC (Zen 4, SHA extensions; 64-256 MiB buffers, the machine busy
with other runs), so a 1 GB store adds 0.6 to 0.9 s when its files are in the page cache (and the disk read
otherwise, which also fills the cache the training then maps). A store written before the hashes were recorded is refused with the command that
rebuilds it, as damage to it could not be seen; ``structnmt features`` rebuilds it by itself.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import os
import re
import shutil
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from ..errors import UserError
from ..fileio.corpus import file_digest
from ..fileio.files import OutputDir, errors_name, temp_dir_beside
from ..syntax.batching import StructureSpec, feature_values
from ..syntax.features import FEATURES, Feature
from ..syntax.trees import trees_from_json
from .feature_columns import (
    Column,
    ColumnReader,
    ColumnWriter,
    StoreValueError,
    column_files,
    layout_of,
    parts_of,
    value_of,
)
from .vocab import Vocab

if TYPE_CHECKING:
    from .dataset import PreparedDataset, PreparedSplit

STORE_FORMAT = 1
"""The layout of a store (this module and :mod:`~structnmt.data.feature_columns`); another is refused."""

FEATURES_DIR = "features"
COMMAND = "features"
CHUNK = 1000  # sentences whose trees are read and whose values are computed at a time


class FeatureStoreError(UserError, ValueError):
    """A feature store that cannot be used: made for another dataset or code, or damaged."""


@dataclass
class StoreMeta:
    """``meta.json`` of a store: the request, what it was made from, and the layout of its values.

    ``code``: :func:`feature_code_version`; ``dataset``: :func:`dataset_identity`; ``shape``: ``"array"``,
    ``"tuple"`` or ``"data"`` (:func:`~structnmt.data.feature_columns.layout_of`); ``splits``: sentences per
    split; ``bytes``: the size of the store's files; ``files``: every column file's ``{"sha256", "bytes"}`` by
    name (None in a store written before they were recorded: :func:`check_store` refuses it)."""

    format: int
    feature: str
    params: dict
    code: str
    dataset: str
    shape: str
    columns: list[Column]
    splits: dict[str, int]
    bytes: int
    files: dict[str, dict] | None = None

    def to_json(self) -> dict:
        """The record as ``meta.json`` holds it."""
        return {**asdict(self), "columns": [c.to_json() for c in self.columns]}

    @classmethod
    def read(cls, path: Path) -> StoreMeta:
        """The record in ``path``; an unreadable one is one sentence."""
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
            obj["columns"] = [Column.from_json(c) for c in obj["columns"]]
            return cls(**obj)
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise FeatureStoreError(f"{path}: not the record of a feature store ({type(err).__name__}); rerun "
                                    "`structnmt features` to rebuild the store, or remove its directory.") from None


# ----------------------------------------------------------------------------- names
def request_text(spec: StructureSpec) -> str:
    """``name:k=v,...`` (the ``--feature`` form of ``structnmt features``; the name alone without parameters)."""
    params = ",".join(f"{k}={_param_text(v)}" for k, v in sorted(spec.params.items()))
    return f"{spec.feature}:{params}" if params else spec.feature


def _param_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def store_name(spec: StructureSpec) -> str:
    """The directory name of a request's store: ``<feature>.<k>=<v>...``, or ``<feature>.<hash>`` when a value
    holds characters a file name should not."""
    name = spec.feature + "".join(f".{k}={_param_text(v)}" for k, v in sorted(spec.params.items()))
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]*", name) and len(name) <= 200:
        return name
    return f"{spec.feature}.{hashlib.sha256(json.dumps(spec.params, sort_keys=True).encode()).hexdigest()[:16]}"


def store_dir(root: Path, spec: StructureSpec) -> Path:
    """Where the store of ``spec`` for the dataset in ``root`` lives."""
    return Path(root) / FEATURES_DIR / store_name(spec)


def rebuild_hint(root: Path, spec: StructureSpec) -> str:
    """The command that rebuilds the store of ``spec``, for the end of a refusal."""
    return f"rerun `structnmt features --data {root} --feature {request_text(spec)}` to rebuild it"


# ----------------------------------------------------------------------------- what a store was made from
def dataset_identity(root: Path) -> str:
    """SHA-256 of the dataset's manifest without its bookkeeping (``seconds``, ``files``, ``installing``): the
    prepare config, the inputs' SHA-256, the vocabularies' SHA-256, the counts and the parser's labels.
    Preparing other inputs or with other settings changes it; preparing the same again does not."""
    path = Path(root) / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise FeatureStoreError(f"{path}: unreadable ({type(err).__name__}); prepare the dataset again.") from None
    if manifest.get("installing"):
        raise FeatureStoreError(f"{path}: the dataset is being rebuilt by `structnmt prepare` (or its rebuild was "
                                "interrupted); wait for it to end, or prepare the dataset again.")
    kept = {k: v for k, v in manifest.items() if k not in ("seconds", "files")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def feature_code_version(feature: Feature) -> str:
    """SHA-256 of the source of the code that computes ``feature``: its function, every function and class of
    its package (or of structnmt) that it reaches through the names it uses, transitively, and
    :func:`~structnmt.syntax.trees.trees_from_json` (how the stored trees are read), with the store format.
    Any edit to that code (comments and docstrings included) gives another version."""
    func, bound = _unwrap(feature.func)
    packages = {"structnmt", (getattr(func, "__module__", None) or "").split(".")[0]}
    reached = _reachable(_roots(func) + [trees_from_json, Vocab], packages)
    h = hashlib.sha256(f"store format {STORE_FORMAT}\n{bound}\n".encode())
    for text in sorted(reached):
        h.update(text.encode("utf-8"))
    return h.hexdigest()


def _unwrap(func: Any) -> tuple[Any, str]:
    """``(the function to read, the repr of what is bound to it)``: a ``functools.partial``'s function and
    arguments; a decorated function's original (``__wrapped__``)."""
    bound = []
    while isinstance(func, functools.partial) or hasattr(func, "__wrapped__"):
        if isinstance(func, functools.partial):
            bound.append(repr((func.args, sorted(func.keywords.items()))))
            func = func.func
        else:
            func = func.__wrapped__
    return func, "|".join(bound)


def _roots(func: Any) -> list[Any]:
    """The function itself, or for a callable object its class."""
    if inspect.isfunction(func) or inspect.isclass(func) or inspect.ismethod(func):
        return [func]
    return [type(func)]


def _reachable(roots: list[Any], packages: set[str]) -> list[str]:
    """The whole source file of every module of ``packages`` that holds a function or class reachable from
    ``roots`` through global names (so its constants count too), and the values of closures met on the way."""
    files: set[str] = set()
    out: list[str] = []
    for obj in _reachable_objects(roots, packages):
        try:
            files.add(inspect.getsourcefile(obj) or "")
        except TypeError:  # made at run time: no file
            out.append(f"{obj.__module__}.{obj.__qualname__} (no source)")
        for cell in getattr(obj, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                out.append(f"closure {obj.__qualname__}: {_stable_repr(cell.cell_contents)}")
    for name in sorted(files - {""}):
        try:
            out.append(Path(name).read_text(encoding="utf-8"))
        except OSError:
            out.append(f"{Path(name).name} (unreadable)")
    return out


def _stable_repr(value: Any) -> str:
    """A closure value as text that is the same in every process: plain data by value, code by its name."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    if isinstance(value, (tuple, list, frozenset, set)):
        return f"{type(value).__name__}({', '.join(sorted(_stable_repr(v) for v in value))})"
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(f"{_stable_repr(k)}: {_stable_repr(v)}" for k, v in value.items())) + "}"
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"<{getattr(value, '__module__', '')}.{name}>"


def _reachable_objects(roots: list[Any], packages: set[str]) -> list[Any]:
    """Every function and class of ``packages`` reachable from ``roots`` through global names, transitively."""
    seen: set[int] = set()
    out: list[Any] = []
    todo: list[Any] = list(roots)
    while todo:
        obj = todo.pop()
        obj = getattr(obj, "__func__", obj)  # a staticmethod or classmethod
        if id(obj) in seen or (getattr(obj, "__module__", None) or "").split(".")[0] not in packages:
            continue
        seen.add(id(obj))
        out.append(obj)
        if isinstance(obj, type):
            todo.extend(v for v in vars(obj).values() if inspect.isfunction(getattr(v, "__func__", v)))
        elif inspect.isfunction(obj):
            scope = obj.__globals__
            todo.extend(scope[n] for n in _code_names(obj.__code__) if n in scope and
                        (inspect.isfunction(scope[n]) or inspect.isclass(scope[n])))
    return out


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # a nested function, lambda or comprehension
            names |= _code_names(const)
    return names


def check_store(directory: Path, spec: StructureSpec, root: Path) -> StoreMeta:
    """The store's record when it holds ``spec`` for this dataset and this feature code; else
    :class:`FeatureStoreError` naming the store and the fix."""
    meta = StoreMeta.read(directory / "meta.json")
    hint = rebuild_hint(root, spec)
    if meta.format != STORE_FORMAT:
        raise FeatureStoreError(f"{directory}: a feature store of another format ({meta.format}, this structnmt reads "
                                f"{STORE_FORMAT}); {hint}.")
    if meta.dataset != dataset_identity(root):
        raise FeatureStoreError(f"{directory}: this feature store was made for another dataset (or another "
                                f"preparation of {root}), so its values may not be this dataset's; {hint}.")
    if meta.feature != spec.feature or meta.params != json.loads(json.dumps(spec.params)):
        raise FeatureStoreError(f"{directory}: holds {request_text(StructureSpec(meta.feature, meta.params))}, not "
                                f"{request_text(spec)}; {hint}.")
    if meta.code != feature_code_version(FEATURES[spec.feature]):
        raise FeatureStoreError(f"{directory}: this store of {spec.feature} was made by another version of the "
                                f"feature's code, so its values may differ from what the code computes now; {hint}.")
    if not isinstance(meta.files, dict):
        raise FeatureStoreError(f"{directory}: this store was written before feature stores recorded their files' "
                                f"SHA-256, so damage to its files could not be seen; {hint}.")
    return meta


def check_files(directory: Path, meta: StoreMeta, splits: list[str], hint: str) -> None:
    """Every column file of ``splits`` has the size and SHA-256 that ``meta.json`` records, or
    :class:`FeatureStoreError` naming the first that does not and the fix (``hint``). Streamed (1 MiB at a
    time): the cost is one read of the files, paid once when a store is opened (module docstring)."""
    for split in splits:
        for column in meta.columns:
            for path in column_files(directory, split, column):
                _check_file(path, (meta.files or {}).get(path.name), hint)


def _check_file(path: Path, recorded, hint: str) -> None:
    """One column file against its record ``{"sha256", "bytes"}``."""
    if not (isinstance(recorded, dict) and isinstance(recorded.get("sha256"), str)
            and isinstance(recorded.get("bytes"), int)):
        raise FeatureStoreError(f"{path}: meta.json records no SHA-256 of this column file; {hint}.")
    try:
        size = path.stat().st_size
        same = size == recorded.get("bytes") and file_digest(path)["sha256"] == recorded["sha256"]
    except OSError as err:
        raise FeatureStoreError(f"{path}: this column file of the feature store cannot be read "
                                f"({err.strerror or type(err).__name__}); {hint}.") from None
    if not same:
        why = (f"{size:,} bytes where {recorded.get('bytes'):,} were written" if size != recorded.get("bytes")
               else "its SHA-256 is not the one recorded when it was written")
        raise FeatureStoreError(f"{path}: this column file of the feature store was changed or damaged since "
                                f"`structnmt features` wrote it ({why}); {hint}.")


# ----------------------------------------------------------------------------- reading
class FeatureStore:
    """The values of one request for one split, memory-mapped: :meth:`value` decodes sentence ``i``."""

    def __init__(self, directory: Path, meta: StoreMeta, split: str):
        self.path = directory
        self.shape = meta.shape
        self.columns = [ColumnReader(directory, split, c, meta.splits[split]) for c in meta.columns]

    def value(self, i: int) -> Any:
        """Sentence ``i``'s value, as the feature returns it (same types, dtypes and values)."""
        return value_of([c.get(i) for c in self.columns], self.shape)


def open_store(root: Path, spec: StructureSpec, split: str, n: int) -> FeatureStore | None:
    """The store of ``spec`` for ``split`` (``n`` sentences) of the dataset in ``root``; None when there is none
    (no ``meta.json`` under its name); :class:`FeatureStoreError` when there is one this run must not use."""
    directory = store_dir(root, spec)
    if not (directory / "meta.json").is_file():
        return None
    meta = check_store(directory, spec, root)
    if meta.splits.get(split) != n:
        raise FeatureStoreError(f"{directory}: holds {meta.splits.get(split, 0):,} sentences of the {split} split, "
                                f"which has {n:,}; {rebuild_hint(root, spec)}.")
    check_files(directory, meta, [split], rebuild_hint(root, spec))  # once here, not per value read
    try:
        return FeatureStore(directory, meta, split)
    except (ValueError, EOFError, OSError) as err:
        raise FeatureStoreError(f"{err}: the feature store is damaged; {rebuild_hint(root, spec)}.") from None


# ----------------------------------------------------------------------------- writing
def build_store(dataset: PreparedDataset, spec: StructureSpec, *, force: bool = False, progress: bool = True,
                log: Callable[[str], None] = print) -> tuple[Path, StoreMeta | None]:
    """Compute ``spec`` for every sentence of ``dataset`` into its store; ``(directory, meta)``, meta None when
    the store was up to date and kept (``force`` rebuilds it). Atomic: built beside, then renamed in."""
    _check_trees(dataset, spec)
    out = OutputDir(dataset.root / FEATURES_DIR, COMMAND)
    name = store_name(spec)
    target = out.claim(name)  # a file or directory there that `structnmt features` did not write is refused
    if not force and (target / "meta.json").is_file():
        try:
            meta = check_store(target, spec, dataset.root)
            if all(meta.splits.get(s) == len(dataset.split(s, structure_cache_mb=0)) for s in dataset.splits):
                check_files(target, meta, list(meta.splits), rebuild_hint(dataset.root, spec))
                log(f"features: {target} is up to date; kept.")
                return target, None
        except FeatureStoreError as err:  # stale or damaged: rebuilt, and said why
            log(f"features: rebuilding {target}: {str(err).split('; rerun')[0]}.")
    tmp = temp_dir_beside(target, ".tmp-")
    try:
        with errors_name(target, tmp):
            meta = write_store(dataset, spec, tmp, progress=progress)
            (tmp / "meta.json").write_text(json.dumps(meta.to_json(), indent=1) + "\n", encoding="utf-8")
        _swap_in(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out.record(name)
    return target, meta


def _swap_in(tmp: Path, target: Path) -> None:
    """Rename the built ``tmp`` to ``target``, moving an older store out of the way first (a training that maps
    its files keeps reading them: they are removed from the directory, not from its mappings)."""
    if not (target.exists() or target.is_symlink()):
        os.rename(tmp, target)
        return
    old = temp_dir_beside(target, ".old-")
    try:
        os.rename(target, old / target.name)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(old, ignore_errors=True)


def write_store(dataset: PreparedDataset, spec: StructureSpec, directory: Path, *, progress: bool) -> StoreMeta:
    """Compute ``spec`` for every sentence of every split of ``dataset`` into the empty ``directory``."""
    feature = FEATURES[spec.feature]
    what = f"feature {request_text(spec)}"
    identity = dataset_identity(dataset.root)  # what the values are computed from
    splits = [dataset.split(s, structure_cache_mb=0) for s in dataset.splits]
    layout: tuple[str, list[Column]] | None = None
    total = 0
    digests: dict[str, dict] = {}
    for sp in sorted(splits, key=lambda s: len(s) == 0):  # the value's layout comes from a sentence
        layout, size = _write_split(sp, spec, directory, layout, what, progress, digests)
        total += size
    assert layout is not None  # a prepared dataset has training sentences
    if dataset_identity(dataset.root) != identity:
        raise FeatureStoreError(f"{dataset.root}: the dataset was prepared again while its features were computed; "
                                "run `structnmt features` again.")
    return StoreMeta(STORE_FORMAT, spec.feature, json.loads(json.dumps(spec.params)), feature_code_version(feature),
                     identity, layout[0], layout[1], {sp.split: len(sp) for sp in splits}, total, digests)


def _check_trees(dataset: PreparedDataset, spec: StructureSpec) -> None:
    """A feature that reads trees needs a dataset prepared with a parser: else one sentence, before any work."""
    needs = FEATURES[spec.feature].needs
    for name in dataset.splits:
        if needs and not dataset.split(name, structure_cache_mb=0).has_trees:
            raise FeatureStoreError(f"{dataset.root}: the feature {spec.feature} reads {' and '.join(needs)} trees, "
                                    f"but the {name} split has none; prepare the dataset with a parser (structnmt "
                                    "prepare ... --parser spacy | file | synthetic).")


def _write_split(sp: PreparedSplit, spec: StructureSpec, directory: Path, layout: tuple[str, list[Column]] | None,
                 what: str, progress: bool, digests: dict) -> tuple[tuple[str, list[Column]] | None, int]:
    """Append every sentence's value of ``sp`` to its column files; ``(layout, bytes written)``; each file's
    SHA-256 and size go into ``digests``."""
    writers: list[ColumnWriter] | None = None
    bar = tqdm(total=len(sp), desc=f"{store_name(spec)} {sp.split}", unit="sent", disable=not progress, leave=False)
    for start in range(0, len(sp), CHUNK):
        ids = range(start, min(len(sp), start + CHUNK))
        trees, wops = sp.structure_inputs(ids, {spec.feature: spec})
        for i, value in zip(ids, feature_values(spec, trees, wops)):
            if layout is None:
                layout = layout_of(value, what)
            if writers is None:
                writers = [ColumnWriter(directory, sp.split, c, what) for c in layout[1]]
            parts = _parts(value, layout, f"{what}, sentence {i} of {sp.split}")
            for w, part in zip(writers, parts):
                w.add(part)
        bar.update(len(ids))
    bar.close()
    if writers is None:
        if layout is None:
            return None, 0
        writers = [ColumnWriter(directory, sp.split, c, what) for c in layout[1]]
    size = sum(w.close() for w in writers)
    for w in writers:
        digests.update(w.digests)
    return layout, size


def _parts(value: Any, layout: tuple[str, list[Column]], where: str) -> tuple:
    """The parts of ``value`` for the store's columns; :class:`StoreValueError` when its shape changed."""
    shape, columns = layout
    ok = {"array": isinstance(value, np.ndarray),
          "tuple": isinstance(value, tuple) and len(value) == len(columns),
          "data": not isinstance(value, (np.ndarray, tuple))}[shape]
    if not ok:
        raise StoreValueError(f"{where}: a {type(value).__name__} where the sentences before gave a value of shape "
                              f"{shape!r} ({len(columns)} part(s)); a feature's value must keep its type.")
    return parts_of(value, shape)
