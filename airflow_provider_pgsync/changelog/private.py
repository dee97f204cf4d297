"""Files that hold rows are private: on a local filesystem the changelog's segments and the lake's
files are created 0600 and the folders pgsync creates for them 0700, whatever the process's
umask; on object stores the bucket's policy decides (the docs say what to set).

The Spark jobs' own writes get the same through their process umask (``hooks/spark_submit.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
PRIVATE_UMASK = 0o077


def make_dirs(path: str) -> None:
    """Create the local folder ``path`` and any missing parents, each new one 0700."""
    missing = []
    folder = Path(path)
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for new in reversed(missing):
        try:
            new.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:  # made meanwhile by another writer
            continue


def create_file(path: str) -> int:
    """A new local file at ``path`` (it must not exist), 0600, open for writing: its descriptor."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)


def create_dir(fs: pafs.FileSystem, path: str) -> None:
    """``fs.create_dir(path, recursive=True)``, private on a local filesystem."""
    if isinstance(fs, pafs.LocalFileSystem):
        make_dirs(path)
    else:
        fs.create_dir(path, recursive=True)


def open_output(fs: pafs.FileSystem, path: str) -> pa.NativeFile:
    """``fs.open_output_stream(path)`` of a new file, created 0600 first on a local filesystem
    (pyarrow then truncates it and keeps its mode)."""
    if isinstance(fs, pafs.LocalFileSystem):
        os.close(create_file(path))
    return fs.open_output_stream(path)
