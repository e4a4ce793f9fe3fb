"""scripts/outputs.py: docs/outputs as one deterministic .tar.xz per folder, and the tracked tree's size limit."""

from __future__ import annotations

import gzip
import importlib.util
import random
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 24


@pytest.fixture(scope="module")
def outputs():
    spec = importlib.util.spec_from_file_location("outputs_script", ROOT / "scripts" / "outputs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def folder(root: Path) -> Path:
    d = root / "grid"
    (d / "runs" / "a" / "seed1").mkdir(parents=True)
    (d / "runs" / "a" / "seed1" / "test.hyp").write_text("ein Hund .\nzwei Katzen\n", encoding="utf-8")
    (d / "runs" / "a" / "seed1" / "test1.hyp.gz").write_bytes(gzip.compress("drei Mäuse\n".encode()))
    (d / "row.seed1.blind.hyp").write_text("x\n", encoding="utf-8")
    return d


def test_pack_is_deterministic_and_unpack_gives_the_plain_files(outputs, tmp_path):
    d = folder(tmp_path)
    first = outputs.pack(d).read_bytes()
    assert outputs.pack(d).read_bytes() == first  # same files, same bytes (git sees no change)
    members = outputs.read_archive(tmp_path / "grid.tar.xz")
    assert members == {"runs/a/seed1/test.hyp": b"ein Hund .\nzwei Katzen\n",
                       "runs/a/seed1/test1.hyp": "drei Mäuse\n".encode(),  # stored decompressed, plain name
                       "row.seed1.blind.hyp": b"x\n"}
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "grid.tar.xz").write_bytes(first)
    assert outputs.unpack(other / "grid.tar.xz") == (3, 0)
    assert (other / "grid" / "runs" / "a" / "seed1" / "test1.hyp").read_text(encoding="utf-8") == "drei Mäuse\n"
    assert outputs.unpack(other / "grid.tar.xz") == (0, 3)  # again: nothing to write


def test_unpack_never_overwrites_a_differing_file(outputs, tmp_path):
    d = folder(tmp_path)
    archive = outputs.pack(d)
    mine = tmp_path / "grid" / "row.seed1.blind.hyp"
    mine.write_text("my newer translation\n", encoding="utf-8")
    (tmp_path / "grid" / "runs" / "a" / "seed1" / "test1.hyp.gz").unlink()
    with pytest.raises(outputs.OutputsError, match="row.seed1.blind.hyp is there and differs"):
        outputs.unpack(archive)
    assert mine.read_text(encoding="utf-8") == "my newer translation\n"
    assert not (tmp_path / "grid" / "runs" / "a" / "seed1" / "test1.hyp").exists()  # nothing written


def test_pack_refuses_a_file_and_its_gzipped_copy(outputs, tmp_path):
    d = folder(tmp_path)
    (d / "runs" / "a" / "seed1" / "test.hyp.gz").write_bytes(gzip.compress(b"other\n"))
    with pytest.raises(outputs.OutputsError, match="test.hyp and .*test.hyp.gz are both there"):
        outputs.pack(d)
    assert not (tmp_path / "grid.tar.xz").exists()


def test_errors_are_sentences(outputs, tmp_path, capsys):
    bad = tmp_path / "broken.tar.xz"
    bad.write_bytes(b"not an archive")
    with pytest.raises(outputs.OutputsError, match="not a readable .tar.xz"):
        outputs.read_archive(bad)
    assert outputs.main(["unpack", "no_such_folder"]) == 2
    assert "no such archive" in capsys.readouterr().err


def test_the_committed_archives_hold_the_folders_the_docs_name(outputs):
    archives = sorted((ROOT / "docs" / "outputs").glob("*.tar.xz"))
    assert len(archives) >= 20
    names = outputs.read_archive(ROOT / "docs" / "outputs" / "cross_paper_multi30k.tar.xz")
    assert "runs/transformer/seed1/result.json" in names and "runs/transformer/seed1/test.hyp" in names
    assert not any(n.endswith(".gz") for n in names)


def tracked_sizes() -> dict[str, int]:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [n for n in files.decode().split("\0") if n]
    return {n: (ROOT / n).stat().st_size for n in names if (ROOT / n).is_file()}


def test_the_tracked_tree_stays_small():
    """A lent GPU machine carries at most 64 MiB, tracked files included: the tree keeps to 24 MiB, leaving the rest
    to .gpu/ (wheels, the dataset, parses; scripts/gpu_carry.sh checks the total), and a file over 1 MiB is tracked
    only with its reason in docs/outputs/README.md."""
    sizes = tracked_sizes()
    assert len(sizes) > 100
    total = sum(sizes.values()) / 2**20
    assert total <= LIMIT_MIB, f"{total:.1f} MiB tracked; pack outputs (scripts/outputs.py), slim pictures"
    readme = (ROOT / "docs" / "outputs" / "README.md").read_text(encoding="utf-8")
    big = [n for n, s in sizes.items() if s > 2**20 and Path(n).name not in readme]
    assert big == [], f"tracked files over 1 MiB without a reason in docs/outputs/README.md: {big}"


def test_an_archive_with_a_member_outside_its_folder_is_refused(outputs, tmp_path):
    import io
    import lzma
    import tarfile

    for name in ("../escaped.txt", "/tmp/abs.txt", "a/../../x.txt"):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
        path = tmp_path / "crafted.tar.xz"
        path.write_bytes(lzma.compress(raw.getvalue()))
        with pytest.raises(outputs.OutputsError, match="a path outside its folder"):
            outputs.unpack(path)
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "x.txt").exists()


def test_no_committed_file_holds_an_absolute_machine_path(outputs):
    """Records travel (a clone, another machine): no file of any archive names a place of the machine that wrote
    it (`/work/exp/data-bin/...`, a run's `/home/...` save_dir); the runner records them relative to the
    directory the grid ran from (structnmt.experiment.datasets.recorded_path)."""
    import re

    absolute = re.compile(rb"(?<![\w.~-])/(?:work|home|root|tmp|Users|mnt|scratch)/")
    found = []
    for archive in sorted((ROOT / "docs" / "outputs").glob("*.tar.xz")):
        for name, data in outputs.read_archive(archive).items():
            hit = absolute.search(data)
            if hit:
                found.append(f"{archive.name}:{name}: {data[hit.start():hit.start() + 60]!r}")
    assert found == [], found[:5]


def _in_outputs(outputs, monkeypatch, root: Path) -> Path:
    """The command's docs/outputs moved to ``root``: `python scripts/outputs.py ACTION NAME` works there."""
    monkeypatch.setattr(outputs, "OUTPUTS", root)
    return root


def _one_error_line(err: str, *fragments: str) -> None:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("outputs: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize("keep", [0.5, 0.97])
def test_a_truncated_archive_is_one_sentence_and_unpacks_nothing(outputs, tmp_path, monkeypatch, capsys, keep):
    """An archive cut short (a partial download or checkout) in its headers or inside a member: `unpack` and `list`
    say so in one sentence (they raised EOFError), and unpack writes nothing, not even a temporary file."""
    root = _in_outputs(outputs, monkeypatch, tmp_path / "outputs")
    d = folder(root)
    (d / "big.hyp").write_bytes(bytes(range(256)) * 4000)  # a member the cut can fall inside
    data = outputs.pack(d).read_bytes()
    shutil.rmtree(d)
    (root / "grid.tar.xz").write_bytes(data[: int(len(data) * keep)])
    for action in ("unpack", "list"):
        assert outputs.main([action, "grid"]) == 2
        _one_error_line(capsys.readouterr().err, f"{root / 'grid.tar.xz'}: not a readable .tar.xz, damaged or cut "
                                                 "short", "check it out again with git")
    assert sorted(p.name for p in root.iterdir()) == ["grid.tar.xz"]


@pytest.mark.parametrize("link", ["file", "folder"])
def test_pack_refuses_a_symbolic_link_inside_the_folder(outputs, tmp_path, monkeypatch, capsys, link):
    """pack followed a link and stored its target's bytes (a file outside the folder, a whole other folder):
    refused in one sentence naming the link, and the archive stays as it was."""
    root = _in_outputs(outputs, monkeypatch, tmp_path / "outputs")
    d = folder(root)
    before = outputs.pack(d).read_bytes()
    secret = tmp_path / "elsewhere"
    secret.mkdir()
    (secret / "private.txt").write_text("not for the repository\n")
    name = d / "runs" / "a" / ("test2.hyp" if link == "file" else "more")
    name.symlink_to(secret / "private.txt" if link == "file" else secret)
    assert outputs.main(["pack", "grid"]) == 2
    _one_error_line(capsys.readouterr().err, f"{name}: a symbolic link", "remove the link")
    assert (root / "grid.tar.xz").read_bytes() == before
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]


def test_list_and_unpack_stream_a_large_member(outputs, tmp_path, monkeypatch, capsys):
    """A 32 MiB member is listed and unpacked with well under its size in Python memory (tracemalloc, which
    counts allocations, not the machine's pages): read a block at a time, never whole. They held each member
    whole (a 400 MiB member took 475 MB)."""
    import hashlib
    import tarfile
    import tracemalloc

    root = _in_outputs(outputs, monkeypatch, tmp_path / "outputs")
    src = tmp_path / "big.hyp"
    block = random.Random(0).randbytes(1 << 20)  # as dense as compressed text: no block inflates to megabytes
    digest = hashlib.sha256()
    with open(src, "wb") as f:
        while f.tell() < 32 << 20:
            f.write(block)
            digest.update(block)
    root.mkdir()
    with tarfile.open(root / "big.tar.xz", "w:xz", preset=0) as tar:  # fast to make; any .tar.xz streams alike
        tar.add(src, arcname="runs/big.hyp")
    size = src.stat().st_size
    tracemalloc.start()
    try:
        assert outputs.main(["list", "big"]) == 0
        listed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        assert outputs.main(["unpack", "big"]) == 0
        unpacked = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out = capsys.readouterr().out
    assert f"{size:>10,}  big/runs/big.hyp" in out and "1 files written" in out
    assert max(listed, unpacked) < 8 << 20, (listed, unpacked)  # a member's size is 32 MiB
    with open(root / "big" / "runs" / "big.hyp", "rb") as f:
        assert hashlib.file_digest(f, "sha256").hexdigest() == digest.hexdigest()
    assert outputs.main(["unpack", "big"]) == 0 and "0 files written, 1 already there" in capsys.readouterr().out
