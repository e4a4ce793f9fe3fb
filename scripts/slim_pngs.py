"""Pictures at web size: every tracked PNG (or the PNGs given) rewritten as a 256-colour palette image when that is
smaller (matplotlib's figures use few colours; the picture looks the same), so that the repository stays small
(tests/test_tree_size.py keeps the limit). Run it before committing new report pictures:

    python scripts/slim_pngs.py              # every tracked PNG
    python scripts/slim_pngs.py docs/reports/my_grid/*.png
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image


def slim(path: Path) -> int:
    """Rewrite ``path`` as a palette PNG if that is smaller; returns the bytes saved (0: left as it was)."""
    before = path.stat().st_size
    try:
        with Image.open(path) as im:
            if im.format != "PNG" or im.mode == "P":
                return 0  # another format, or a palette already: left as it is
            rgb = im.convert("RGB")
    except (OSError, ValueError) as err:  # not an image (PIL's UnidentifiedImageError is an OSError)
        raise SystemExit(f"slim_pngs: {path}: not a readable picture ({err}); give PNG files.") from None
    small = rgb.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        small.save(tmp, optimize=True)
        after = os.path.getsize(tmp)
        if after >= before:
            return 0
        os.replace(tmp, path)  # atomic: a reader never sees half a picture
        return before - after
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or [Path(p) for p in subprocess.run(
        ["git", "ls-files", "*.png"], capture_output=True, text=True, check=True).stdout.split()]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"slim_pngs: {missing[0]}: no such file; give PNG files (none given: every tracked PNG).")
    saved = sum(slim(p) for p in paths)
    print(f"slim_pngs: {len(paths)} pictures, {saved / 1048576:.1f} MiB saved")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
