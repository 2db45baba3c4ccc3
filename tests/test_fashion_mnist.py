"""d2l_ext.fashion_mnist: where the files are found, verification, download and load()."""

from __future__ import annotations

import contextlib
import functools
import gzip
import os
import shutil
import socket
import stat
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from d2l_ext import fashion_mnist
from d2l_ext.fashion_mnist import DataError

pytestmark = pytest.mark.usefixtures("private_cache")

NAMES = list(fashion_mnist.FILES)  # the order in which download() fetches them
PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


def real_file(data_dir: Path, name: str) -> Path:
    """The file ``name`` in ``data_dir``: ``name.gz`` or ``name``."""
    for path in (data_dir / f"{name}.gz", data_dir / name):
        if path.is_file():
            return path
    raise FileNotFoundError(data_dir / name)


def real_bytes(data_dir: Path, name: str) -> bytes:
    """A real file's decompressed bytes."""
    raw = real_file(data_dir, name).read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def link_files(data_dir: Path, dst: Path, names=NAMES) -> Path:
    """Symlink the real files ``names`` into ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        src = real_file(data_dir, name)
        (dst / src.name).symlink_to(src)
    return dst


def files_in(directory: Path) -> list[str]:
    """Every entry under ``directory`` (hidden ones included), or [] if it does not exist."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*")) \
        if directory.exists() else []


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No D2L_DATA_DIR, an empty Debian directory, a fresh cache directory, no proxy."""
    monkeypatch.delenv("D2L_DATA_DIR", raising=False)
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    debian = tmp_path / "debian"
    debian.mkdir()
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", debian)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    fashion_mnist._read_split.cache_clear()
    yield debian
    fashion_mnist._read_split.cache_clear()


# ---------------------------------------------------------------- resolution order
def test_cache_dir_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fashion_mnist.cache_dir() == tmp_path / "d2l_ext" / "fashion-mnist"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert fashion_mnist.cache_dir() == Path.home() / ".cache" / "d2l_ext" / "fashion-mnist"


def test_candidate_dirs_order(isolated, tmp_path, monkeypatch):
    cache = fashion_mnist.cache_dir()
    assert fashion_mnist.candidate_dirs() == [cache, isolated]
    monkeypatch.setenv("D2L_DATA_DIR", str(tmp_path / "env"))
    assert fashion_mnist.candidate_dirs(tmp_path / "root") == [
        tmp_path / "root", tmp_path / "env", cache, isolated]


def test_resolution_order(isolated, fmnist_dir, tmp_path, monkeypatch):
    """root > D2L_DATA_DIR > cache directory > Debian's directory."""
    root = link_files(fmnist_dir, tmp_path / "root")
    env = link_files(fmnist_dir, tmp_path / "env")
    cache = link_files(fmnist_dir, fashion_mnist.cache_dir())
    link_files(fmnist_dir, isolated)
    monkeypatch.setenv("D2L_DATA_DIR", str(env))
    assert fashion_mnist.find(root) == root
    assert fashion_mnist.find(str(root)) == root
    assert fashion_mnist.find() == env
    monkeypatch.delenv("D2L_DATA_DIR")
    assert fashion_mnist.find() == cache
    shutil.rmtree(cache)
    assert fashion_mnist.find() == isolated


def test_incomplete_directory_is_skipped_with_a_warning(isolated, fmnist_dir, tmp_path,
                                                        monkeypatch):
    partial = link_files(fmnist_dir, tmp_path / "partial", NAMES[:3])
    env = link_files(fmnist_dir, tmp_path / "env")
    monkeypatch.setenv("D2L_DATA_DIR", str(env))
    with pytest.warns(UserWarning, match=f"{partial} lacks {NAMES[3]}"):
        assert fashion_mnist.find(partial) == env
    monkeypatch.setenv("D2L_DATA_DIR", str(partial))
    link_files(fmnist_dir, isolated)
    with pytest.warns(UserWarning, match="not used"):
        assert fashion_mnist.find() == isolated


def test_the_error_names_the_file_a_directory_lacks(isolated, fmnist_dir, tmp_path):
    partial = link_files(fmnist_dir, tmp_path / "partial", NAMES[:3])
    with pytest.warns(UserWarning), pytest.raises(DataError) as err:
        fashion_mnist.find(partial, base_url=closed_port_url())
    message = str(err.value)
    assert f"{partial} (lacks {NAMES[3]})" in message
    assert f"{isolated} (has none of the files)" in message


def test_load_from_root(isolated, fmnist_dir, tmp_path):
    root = link_files(fmnist_dir, tmp_path / "root")
    images, labels = fashion_mnist.load(False, root=root, num_examples=10)
    assert labels.tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]
    assert images.shape == (10, 28, 28)


def test_uncompressed_files(isolated, fmnist_dir, tmp_path):
    root = link_files(fmnist_dir, tmp_path / "raw", NAMES[:2])
    for name in NAMES[2:]:
        (root / name).write_bytes(real_bytes(fmnist_dir, name))
    images, labels = fashion_mnist.load(False, root=root)
    expected_images, expected_labels = fashion_mnist.load(False, root=fmnist_dir)
    assert fashion_mnist.find(root) == root
    np.testing.assert_array_equal(images, expected_images)
    np.testing.assert_array_equal(labels, expected_labels)


# ---------------------------------------------------------------- damaged files
def test_truncated_gzip(isolated, fmnist_dir, tmp_path):
    name = "t10k-images-idx3-ubyte"
    root = link_files(fmnist_dir, tmp_path / "root", [n for n in NAMES if n != name])
    gz = gzip.compress(real_bytes(fmnist_dir, name), compresslevel=1)
    (root / f"{name}.gz").write_bytes(gz[:len(gz) // 2])
    with pytest.raises(DataError, match="truncated") as err:
        fashion_mnist.load(False, root=root)
    assert str(root.resolve() / f"{name}.gz") in str(err.value)


def test_wrong_content(isolated, fmnist_dir, tmp_path):
    """A valid gzip file with the wrong content fails its SHA-256 check."""
    name = "t10k-labels-idx1-ubyte"
    root = link_files(fmnist_dir, tmp_path / "root", [n for n in NAMES if n != name])
    labels = bytearray(real_bytes(fmnist_dir, name))
    labels[8] = (labels[8] + 1) % 10  # one wrong label
    (root / f"{name}.gz").write_bytes(gzip.compress(bytes(labels)))
    with pytest.raises(DataError, match="SHA-256") as err:
        fashion_mnist.load(False, root=root)
    assert str(root.resolve() / f"{name}.gz") in str(err.value)
    assert fashion_mnist.FILES[name] in str(err.value)


# ---------------------------------------------------------------- offline / download
def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def test_offline_without_any_copy(isolated, tmp_path):
    root = tmp_path / "empty-root"
    root.mkdir()
    with pytest.raises(DataError) as err:
        fashion_mnist.find(root, base_url=closed_port_url())
    message = str(err.value)
    assert "apt-get install dataset-fashion-mnist" in message
    assert "root=" in message and "D2L_DATA_DIR" in message
    assert "internet" in message and "downloaded" in message
    for searched in (root, fashion_mnist.cache_dir(), isolated):
        assert str(searched) in message
    assert files_in(fashion_mnist.cache_dir()) == []


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def serve(directory: Path, handler=QuietHandler):
    """Serve ``directory`` over HTTP on 127.0.0.1; yield (base_url, requested paths)."""
    requested: list[str] = []

    class Recording(handler):
        def do_GET(self) -> None:
            requested.append(self.path)
            super().do_GET()

    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Recording, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def served_dir(fmnist_dir, tmp_path_factory) -> Path:
    """The four real files, gzipped, as the download server offers them."""
    directory = tmp_path_factory.mktemp("server")
    for name in NAMES:
        src = real_file(fmnist_dir, name)
        if src.suffix == ".gz":
            (directory / src.name).symlink_to(src)
        else:
            (directory / f"{name}.gz").write_bytes(gzip.compress(src.read_bytes()))
    return directory


def test_download_into_cache(isolated, fmnist_dir, served_dir):
    cache = fashion_mnist.cache_dir()
    with serve(served_dir) as (url, requested):
        assert fashion_mnist.find(base_url=url) == cache
        assert requested == [f"/{name}.gz" for name in NAMES]
        assert files_in(cache) == sorted(f"{name}.gz" for name in NAMES)
        # now found in the cache: nothing more is fetched
        assert fashion_mnist.find(base_url=url) == cache
        assert len(requested) == 4
    images, labels = fashion_mnist.load(False, num_examples=10)
    assert labels.tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]
    expected = fashion_mnist.load(False, root=fmnist_dir, num_examples=10)[0]
    np.testing.assert_array_equal(images, expected)


def test_download_into_directory_fetches_only_missing(isolated, fmnist_dir, served_dir,
                                                      tmp_path):
    target = link_files(fmnist_dir, tmp_path / "target", NAMES[:3])
    with serve(served_dir) as (url, requested):
        assert fashion_mnist.download(target, base_url=url) == target
    assert requested == [f"/{NAMES[3]}.gz"]
    assert files_in(target) == sorted(f"{name}.gz" for name in NAMES)
    assert files_in(fashion_mnist.cache_dir()) == []


def test_download_of_corrupt_file(isolated, fmnist_dir, served_dir, tmp_path):
    server = tmp_path / "server"
    link_files(served_dir, server, NAMES[1:])
    first = bytearray(real_bytes(fmnist_dir, NAMES[0])[:1000])
    first[-1] ^= 0xFF
    (server / f"{NAMES[0]}.gz").write_bytes(gzip.compress(bytes(first)))
    with serve(server) as (url, requested), pytest.raises(DataError, match="SHA-256"):
        fashion_mnist.find(base_url=url)
    assert requested == [f"/{NAMES[0]}.gz"]
    assert files_in(fashion_mnist.cache_dir()) == []  # not even a .part file


def test_download_error_names_the_url(isolated, fmnist_dir, served_dir, tmp_path):
    """Not the temporary file, which is gone by then."""
    server = link_files(served_dir, tmp_path / "server", NAMES[1:])
    (server / f"{NAMES[0]}.gz").write_bytes(gzip.compress(b"not an IDX file"))
    with serve(server) as (url, _), pytest.raises(DataError) as err:
        fashion_mnist.find(base_url=url)
    assert f"{url}{NAMES[0]}.gz" in str(err.value)
    assert ".part" not in str(err.value)


def test_downloaded_files_have_the_usual_permissions(isolated, fmnist_dir, served_dir, tmp_path):
    """As any file created under the umask (mkstemp alone gives 0600)."""
    target = link_files(fmnist_dir, tmp_path / "shared", NAMES[:3])
    with serve(served_dir) as (url, _):
        fashion_mnist.download(target, base_url=url)
    umask = os.umask(0o022)
    os.umask(umask)
    mode = stat.S_IMODE((target / f"{NAMES[3]}.gz").stat().st_mode)
    assert mode == 0o666 & ~umask


class DroppingHandler(QuietHandler):
    """Announces the whole file but sends a quarter of it, then closes the connection."""

    def do_GET(self) -> None:
        body = Path(self.translate_path(self.path)).read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:len(body) // 4])
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)


def test_download_interrupted(isolated, served_dir):
    with serve(served_dir, DroppingHandler) as (url, requested), \
            pytest.raises(DataError) as err:
        fashion_mnist.find(base_url=url)
    assert requested == [f"/{NAMES[0]}.gz"]
    assert "truncated" in str(err.value) or "could not be downloaded" in str(err.value)
    assert files_in(fashion_mnist.cache_dir()) == []


# ---------------------------------------------------------------- load
def test_a_stalled_server_fails_within_the_timeout(isolated, monkeypatch):
    import time

    monkeypatch.setattr(fashion_mnist, "TIMEOUT", 1.0)
    stop = threading.Event()

    class SilentHandler(QuietHandler):
        """Accepts the request and never answers: a stalled mirror."""

        def do_GET(self) -> None:
            stop.wait(30)

    with serve(Path("."), SilentHandler) as (url, requested):
        start = time.perf_counter()
        try:
            with pytest.raises(DataError, match="did not answer within 1 s"):
                fashion_mnist.find(base_url=url)
        finally:
            stop.set()
    assert time.perf_counter() - start < 10
    assert files_in(fashion_mnist.cache_dir()) == []


def test_parts_left_by_a_killed_download_are_removed(isolated, served_dir):
    import subprocess
    import sys

    cache = fashion_mnist.cache_dir()
    cache.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = cache / f".{NAMES[0]}.{dead}.k3j_x.part"
    live = cache / f".{NAMES[1]}.{os.getpid()}.a8b_q.part"  # a download under way
    stale.write_bytes(b"half a file")
    live.write_bytes(b"still coming")
    with serve(served_dir) as (url, _):
        assert fashion_mnist.find(base_url=url) == cache
    assert not stale.exists() and live.exists()
    assert files_in(cache) == sorted([live.name] + [f"{name}.gz" for name in NAMES])


def test_load_train(fmnist_dir):
    images, labels = fashion_mnist.load(True)
    assert images.shape == (60000, 28, 28) and labels.shape == (60000,)
    assert images.dtype == np.uint8 and labels.dtype == np.uint8
    assert labels[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
    assert np.bincount(labels).tolist() == [6000] * 10
    assert not images.flags.writeable and not labels.flags.writeable


def test_load_test(fmnist_dir):
    images, labels = fashion_mnist.load(False)
    assert images.shape == (10000, 28, 28) and labels.shape == (10000,)
    assert images.dtype == np.uint8
    assert labels[:10].tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]
    assert np.bincount(labels).tolist() == [1000] * 10
    assert images.max() == 255 and images.min() == 0


def test_load_num_examples(fmnist_dir):
    all_images, all_labels = fashion_mnist.load(True)
    images, labels = fashion_mnist.load(True, num_examples=100)
    assert images.shape == (100, 28, 28) and labels.shape == (100,)
    np.testing.assert_array_equal(images, all_images[:100])
    np.testing.assert_array_equal(labels, all_labels[:100])
    assert len(fashion_mnist.load(False, num_examples=20000)[1]) == 10000


@pytest.mark.parametrize("num_examples", [0, -5])
def test_load_num_examples_must_be_positive(fmnist_dir, num_examples):
    with pytest.raises(ValueError, match=str(num_examples)):
        fashion_mnist.load(False, num_examples=num_examples)


def test_text_labels():
    assert len(fashion_mnist.TEXT_LABELS) == 10
    assert fashion_mnist.TEXT_LABELS[9] == "ankle boot"
