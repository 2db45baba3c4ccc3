"""Find, verify and read Fashion-MNIST without torchvision or gluon's downloader.

The four IDX files are looked up, in this order, in

1. the ``root`` argument,
2. the directory named by the ``D2L_DATA_DIR`` environment variable,
3. the user cache directory (``$XDG_CACHE_HOME/d2l_ext/fashion-mnist``,
   by default ``~/.cache/d2l_ext/fashion-mnist``),
4. Debian's copy, ``/usr/share/datasets/fashion-mnist``
   (``apt-get install dataset-fashion-mnist``),

and only if none has them are they downloaded over HTTPS into the cache
directory. Each file may be gzipped or not. Checksums are taken of the
*decompressed* bytes, because Debian recompresses the ``.gz`` files.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import socket
import tempfile
import urllib.error
import urllib.request
import warnings
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
BASE_URL = "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"

#: SHA-256 of each file's decompressed bytes.
FILES = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}

#: Seconds a download waits for the server (to connect, or for the next bytes) before it
#: gives up: a stalled mirror fails in this time, not in minutes.
TIMEOUT = 15.0

TEXT_LABELS = ["t-shirt", "trouser", "pullover", "dress", "coat",
               "sandal", "shirt", "sneaker", "bag", "ankle boot"]


class DataError(RuntimeError):
    """Fashion-MNIST is missing or damaged; the message says what to do."""


def cache_dir() -> Path:
    """The user cache directory where downloads go."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "d2l_ext" / "fashion-mnist"


def candidate_dirs(root: str | os.PathLike | None = None) -> list[Path]:
    """The directories searched for the files, in order."""
    dirs = []
    if root is not None:
        dirs.append(Path(root))
    if os.environ.get("D2L_DATA_DIR"):
        dirs.append(Path(os.environ["D2L_DATA_DIR"]))
    dirs += [cache_dir(), DEBIAN_DIR]
    return dirs


def _file_in(directory: Path, name: str) -> Path | None:
    for candidate in (directory / f"{name}.gz", directory / name):
        if candidate.is_file():
            return candidate
    return None


def _missing(directory: Path) -> list[str]:
    """The names of the four files that ``directory`` lacks (all four if it does not exist)."""
    return [name for name in FILES if not _file_in(directory, name)]


_REMEDY = ("Delete it (it is downloaded again on the next call) or reinstall the Debian "
           "package dataset-fashion-mnist.")


def _decompressed(raw: bytes, where: str, remedy: str) -> bytes:
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as err:
            raise DataError(f"{where} is truncated or not a valid gzip file ({err}). "
                            f"{remedy}") from err
    return raw


def _checked(raw: bytes, name: str, where: str, remedy: str = _REMEDY) -> bytes:
    """The decompressed bytes of file ``name``, if their checksum is right."""
    data = _decompressed(raw, where, remedy)
    digest = hashlib.sha256(data).hexdigest()
    if digest != FILES[name]:
        raise DataError(f"{where} is corrupt: SHA-256 of its decompressed bytes is {digest}, "
                        f"expected {FILES[name]}. {remedy}")
    return data


def _verified(path: Path, name: str) -> bytes:
    return _checked(path.read_bytes(), name, str(path))


def download(directory: Path | None = None, base_url: str = BASE_URL) -> Path:
    """Download the four files into ``directory`` (default: the cache directory).

    Each file is written to a temporary file beside its destination and renamed
    only once its checksum matches, so an interruption leaves nothing half-written.
    """
    directory = Path(directory) if directory is not None else cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    remove_stale_parts(directory)
    umask = os.umask(0)
    os.umask(umask)
    for name in FILES:
        if _file_in(directory, name):
            continue
        url = base_url + name + ".gz"
        # the pid in the name tells a later call whether the download is still under way
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.{os.getpid()}.",
                                   suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out, \
                    urllib.request.urlopen(url, timeout=TIMEOUT) as response:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
            _checked(Path(tmp).read_bytes(), name, f"the download from {url}",
                     "Nothing was kept; try again later, or get the data another way "
                     "(apt-get install dataset-fashion-mnist, or root=/D2L_DATA_DIR).")
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates files readable by the owner only
            os.replace(tmp, directory / f"{name}.gz")
        except (TimeoutError, socket.timeout) as err:
            os.unlink(tmp)
            raise urllib.error.URLError(f"{url} did not answer within {TIMEOUT:g} s") from err
        except BaseException:
            os.unlink(tmp)
            raise
    return directory


def remove_stale_parts(directory: Path) -> list[Path]:
    """Remove the ``.part`` files of downloads whose process no longer exists (a process
    killed while downloading cannot remove its own); return those removed."""
    removed = []
    for part in Path(directory).glob(".*.part"):
        pid = part.name.split(".")[2] if part.name.count(".") >= 3 else ""
        if not pid.isdigit() or not _alive(int(pid)):
            part.unlink(missing_ok=True)
            removed.append(part)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _not_found_message(searched: list[Path], err: Exception) -> str:
    def state(d: Path) -> str:
        missing = _missing(d)
        if not d.is_dir():
            return "does not exist"
        if len(missing) == len(FILES):
            return "has none of the files"
        return f"lacks {', '.join(missing)}"

    where = "\n".join(f"  - {d} ({state(d)})" for d in searched)
    return (f"Fashion-MNIST was not found and could not be downloaded ({err}).\n"
            f"Searched:\n{where}\n"
            "Get the data in one of three ways:\n"
            "  1. install Debian's copy: apt-get install dataset-fashion-mnist\n"
            "  2. put the four *-ubyte(.gz) files in a directory and pass root=DIR "
            "or set D2L_DATA_DIR=DIR\n"
            f"  3. connect to the internet: they are then downloaded into {cache_dir()}")


def find(root: str | os.PathLike | None = None, base_url: str = BASE_URL) -> Path:
    """Return a directory holding all four files, downloading them if needed."""
    searched = candidate_dirs(root)
    for directory in searched:
        missing = _missing(directory)
        if not missing:
            return directory
        if len(missing) < len(FILES) and directory != cache_dir():
            # part of a copy: the reader probably meant this one
            warnings.warn(f"{directory} lacks {', '.join(missing)} (.gz or not), so it is "
                          "not used; looking further.", stacklevel=2)
    try:
        return download(cache_dir(), base_url)
    except (urllib.error.URLError, OSError) as err:
        raise DataError(_not_found_message(searched, err)) from err


def _parse_idx(data: bytes, path: Path) -> np.ndarray:
    ndim = data[3]
    if data[:3] != b"\x00\x00\x08" or ndim not in (1, 3):
        raise DataError(f"{path} is not an IDX file of unsigned bytes.")
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


@lru_cache(maxsize=4)
def _read_split(directory: Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    prefix = "train" if train else "t10k"
    arrays = []
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        name = f"{prefix}-{kind}"
        path = _file_in(directory, name)
        if path is None:
            raise DataError(f"{directory / name}.gz disappeared while reading.")
        arrays.append(_parse_idx(_verified(path, name), path))
    return arrays[0], arrays[1]


def load(train: bool = True, root: str | os.PathLike | None = None,
         num_examples: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(n, 28, 28)`` and labels ``(n,)`` as read-only uint8 arrays.

    ``num_examples`` keeps only the first examples (for quick runs).
    """
    images, labels = _read_split(find(root).resolve(), train)
    if num_examples is not None:
        if num_examples < 1:
            raise ValueError(f"num_examples must be positive, got {num_examples}.")
        images, labels = images[:num_examples], labels[:num_examples]
    return images, labels
