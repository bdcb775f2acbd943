#!/usr/bin/env python3
"""A set of real photos for `bench --part preprocess`, from Debian's wallpaper packages.

The benchmark's default set is generated (photo-like shading, blobs and noise); this one is
made of photographs: the nature and landscape photos of `mate-backgrounds` and
`plasma-workspace-wallpapers` (Debian bookworm, fetched with `apt-get download`, so no
internet beyond the package mirror is needed). Photos whose files are already dataset-sized
(up to 2,000 px a side) are copied as published (their own encoders: baseline and
progressive JPEGs); the others are scaled by Pillow (Lanczos) to a cycle of dataset sizes
(560 to 2,000 px on the long side, landscape and portrait crops) and saved as Pillow's default
JPEG (quality 90, 4:2:0) or, every fourth, as PNG, as benchmark releases ship them (COCO and
Flickr JPEGs, Winoground's and EqBen's PNGs).

    python3 scripts/bench/real_photos.py --out target/real-photos
    python3 scripts/bench/bench_preprocess.py --images target/real-photos --threads 1

Needs apt-get (any user: downloads only) and Pillow.
"""

import argparse
import io
import subprocess
import tarfile
import tempfile
from pathlib import Path

from PIL import Image

PACKAGES = ["mate-backgrounds", "plasma-workspace-wallpapers"]

# Photographs in those packages (the paintings, renders and patterns are left out).
PHOTOS = [
    "backgrounds/mate/nature/Aqua.jpg",
    "backgrounds/mate/nature/Blinds.jpg",
    "backgrounds/mate/nature/Dune.jpg",
    "backgrounds/mate/nature/FreshFlower.jpg",
    "backgrounds/mate/nature/Garden.jpg",
    "backgrounds/mate/nature/GreenMeadow.jpg",
    "backgrounds/mate/nature/LadyBird.jpg",
    "backgrounds/mate/nature/RainDrops.jpg",
    "backgrounds/mate/nature/Storm.jpg",
    "backgrounds/mate/nature/TwoWings.jpg",
    "backgrounds/mate/nature/Wood.jpg",
    "backgrounds/mate/nature/YellowFlower.jpg",
    "wallpapers/BytheWater/contents/images/2560x1600.jpg",
    "wallpapers/ColdRipple/contents/images/2560x1600.jpg",
    "wallpapers/ColorfulCups/contents/images/2560x1600.jpg",
    "wallpapers/DarkestHour/contents/images/2560x1600.jpg",
    "wallpapers/EveningGlow/contents/images/2560x1600.jpg",
    "wallpapers/FallenLeaf/contents/images/2560x1600.jpg",
    "wallpapers/Grey/contents/images/2560x1600.jpg",
    "wallpapers/Kite/contents/images/2560x1600.jpg",
    "wallpapers/OneStandsOut/contents/images/2560x1600.jpg",
    "wallpapers/Path/contents/images/2560x1600.jpg",
    "wallpapers/summer_1am/contents/images/2560x1600.jpg",
]

# Long side, and whether the crop is portrait, for the photos that are scaled.
SIZES = [(640, False), (560, True), (1024, False), (800, True), (1280, False), (2000, False), (1600, True)]


def extract(deb: Path, wanted: set, into: Path):
    """The `wanted` members (paths under usr/share/) of a .deb's data archive."""
    listing = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(listing)) as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("./usr/share/")
            if name in wanted and member.isfile():
                target = into / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("target/real-photos"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subprocess.run(["apt-get", "download", *PACKAGES], cwd=tmp, check=True)
        for deb in tmp.glob("*.deb"):
            extract(deb, set(PHOTOS), tmp / "share")
        scaled = 0
        for n, photo in enumerate(PHOTOS):
            source = tmp / "share" / photo
            stem = f"{n:02d}-{photo.split('/')[-1].split('.')[0] if 'mate' in photo else photo.split('/')[1]}"
            with Image.open(source) as im:
                if max(im.size) <= 2000:
                    (args.out / f"{stem}.jpg").write_bytes(source.read_bytes())
                    print(f"{stem}.jpg: as published, {im.size[0]}x{im.size[1]}, progressive={bool(im.info.get('progressive'))}")
                    continue
                long_side, portrait = SIZES[scaled % len(SIZES)]
                im = im.convert("RGB")
                w, h = im.size
                if portrait:  # a centred 3:4 crop, stood up
                    crop_w = h * 3 // 4
                    im = im.crop(((w - crop_w) // 2, 0, (w + crop_w) // 2, h))
                    w, h = im.size
                scale = long_side / max(w, h)
                im = im.resize((round(w * scale), round(h * scale)), Image.LANCZOS)
                if scaled % 4 == 3:
                    name = f"{stem}.png"
                    im.save(args.out / name)
                else:
                    name = f"{stem}.jpg"
                    im.save(args.out / name, quality=90)
                print(f"{name}: scaled to {im.size[0]}x{im.size[1]}")
                scaled += 1


if __name__ == "__main__":
    main()
