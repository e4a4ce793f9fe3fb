"""scripts/outputs.py: docs/outputs as one deterministic .tar.xz per folder, and the tracked tree's size limit."""

from __future__ import annotations

import gzip
import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 20


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
    """A lent GPU machine carries at most 64 MiB, tracked files included: the tree keeps to 20 MiB, and a file
    over 1 MiB is tracked only with its reason in docs/outputs/README.md."""
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
