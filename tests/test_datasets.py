"""The bundled MNIST subset, loaded through torchvision's own code."""

import functools
import hashlib
import http.server
import threading
from collections import Counter
from pathlib import Path

import pytest
import torch
from torchvision.datasets import MNIST
from torchvision.transforms import ToTensor

from autograder.datasets import RAW_FILES, provide_mnist

BUNDLED = Path(__file__).resolve().parent.parent / "autograder" / "data" / "mnist"
# A mirror nobody listens on: if torchvision tried to download, it would fail.
DEAD_MIRROR = ["http://127.0.0.1:9/"]


def check_split(root: Path, train: bool, expected_len: int) -> MNIST:
    dataset = MNIST(root=root, train=train, download=True, transform=ToTensor())
    assert len(dataset) == expected_len
    for image, label in dataset:
        assert image.shape == (1, 28, 28)
        assert image.dtype == torch.float32
        assert 0.0 <= image.min() and image.max() <= 1.0
        assert 0 <= label <= 9
    counts = Counter(dataset.targets.tolist())
    assert sorted(counts) == list(range(10))
    assert min(counts.values()) >= 0.8 * expected_len / 10
    return dataset


def test_torchvision_loads_provided_files_without_downloading(tmp_path, monkeypatch):
    monkeypatch.setattr(MNIST, "mirrors", DEAD_MIRROR)
    provide_mnist(tmp_path)

    train = check_split(tmp_path, train=True, expected_len=2000)
    test = check_split(tmp_path, train=False, expected_len=500)

    train_images = {image.numpy().tobytes() for image in train.data}
    test_images = {image.numpy().tobytes() for image in test.data}
    assert len(train_images) == 2000 and len(test_images) == 500
    assert train_images.isdisjoint(test_images)


def snapshot(raw: Path) -> dict[str, tuple[bytes, int, int]]:
    """Content, inode and modification time of each file: a rewrite or an
    os.replace changes at least one of them."""
    return {p.name: (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns) for p in raw.iterdir()}


def test_second_call_leaves_files_untouched(tmp_path):
    raw = provide_mnist(tmp_path) / "MNIST" / "raw"
    before = snapshot(raw)
    assert sorted(before) == sorted(RAW_FILES)

    provide_mnist(tmp_path)
    assert snapshot(raw) == before


def test_existing_file_is_not_overwritten(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    existing = raw / "train-images-idx3-ubyte"
    existing.write_bytes(b"someone else's training images")
    before = snapshot(raw)

    provide_mnist(tmp_path)

    after = snapshot(raw)
    assert after["train-images-idx3-ubyte"] == before["train-images-idx3-ubyte"]
    assert sorted(after) == sorted(RAW_FILES)


@pytest.fixture
def local_mirror(monkeypatch):
    """Serve the bundled .gz files over HTTP on localhost; yield the URL and the
    list of paths that were requested."""
    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_request(self, code="-", size="-"):
            requested.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=BUNDLED))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # A proxy configured in the environment must not intercept localhost.
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_torchvision_download_still_works(tmp_path, monkeypatch, local_mirror):
    url, requested = local_mirror
    monkeypatch.setattr(MNIST, "mirrors", [url])
    # torchvision checks each download against the md5 in MNIST.resources,
    # which are those of the full 60000/10000-image archives.  Our mirror serves
    # the small subset, so we give torchvision its md5s; everything else (the
    # fetch, the check, the unpacking) is torchvision's own download().
    monkeypatch.setattr(
        MNIST,
        "resources",
        [(f"{name}.gz", hashlib.md5((BUNDLED / f"{name}.gz").read_bytes()).hexdigest()) for name in RAW_FILES],
    )

    dataset = MNIST(root=tmp_path, train=True, download=True)

    assert len(dataset) == 2000
    assert set(requested) == {f"/{name}.gz" for name in RAW_FILES}
    raw = tmp_path / "MNIST" / "raw"
    assert all((raw / name).is_file() for name in RAW_FILES)
