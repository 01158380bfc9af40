"""A small, serial, read-only parser of the HDF5 structures ckptio's own files use, so that reading an HDF5
checkpoint (detection, metadata, extents) needs no h5py: a plain ``pip install ckptio`` restarts from it.

What it understands (the HDF5 File Format Specification, version 3): superblocks 0-3, object headers 1 and 2
(with continuation blocks), groups as symbol tables (v1 B-tree + local heap) or compact link messages,
attribute messages 1-3 stored in the object header, simple/scalar dataspaces, fixed-point, floating-point and
fixed-length string datatypes, and contiguous or compact data layouts (messages 3 and 4). That is everything
h5py writes for a ckptio checkpoint with HDF5's default (earliest) format. Anything else (dense attribute or
link storage in fractal heaps, shared messages, chunked layouts) raises :class:`Unsupported`, which the caller
reports as "needs h5py" -- never as damage. Structures that contradict the file (addresses beyond its end,
wrong signatures, loops) raise :class:`ckptio.errors.CorruptCheckpointError`.

Local, no MPI: used by ``backends/hdf5.py`` when h5py cannot be imported, and by
``backends/hdf5_checks.py`` to look at what HDF5 itself would crash on (:meth:`H5Lite.datatype_message`).
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from ckptio.backends.base import CapabilityError, CorruptCheckpointError

SIGNATURE = b"\x89HDF\r\n\x1a\n"
UNDEFINED = 0xFFFFFFFFFFFFFFFF
_MSG_DATASPACE, _MSG_LINK_INFO, _MSG_DATATYPE, _MSG_LINK, _MSG_LAYOUT = 0x01, 0x02, 0x03, 0x06, 0x08
_MSG_ATTRIBUTE, _MSG_CONTINUATION, _MSG_SYMBOL_TABLE, _MSG_ATTRIBUTE_INFO = 0x0C, 0x10, 0x11, 0x15
_MAX_CHUNKS = 10_000  # object header chunks followed at most (a loop of continuations is damage)


class Unsupported(CapabilityError):
    """A valid HDF5 structure this parser does not implement: reading the file needs h5py."""


@dataclass
class Dataset:
    shape: tuple[int, ...]
    dtype: np.dtype | None  # None: a datatype this parser does not decode
    address: int | None  # contiguous data: its file offset (None: not allocated, or compact)
    compact: bytes | None = None


class H5Lite:
    """An open HDF5 file. ``lookup`` finds objects by path; ``attrs`` and ``dataset`` describe them."""

    def __init__(self, path: str):
        self.path = path
        self._children: dict[int, dict[bytes, int]] = {}  # group address -> its links (read on first lookup)
        self.fd = os.open(path, os.O_RDONLY)
        try:
            self.size = os.fstat(self.fd).st_size
            self._superblock()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> H5Lite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ primitives
    def _bad(self, what: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{self.path}: HDF5 structure is damaged ({what})")

    def _bytes(self, at: int, n: int) -> bytes:
        if at < 0 or n < 0 or at + n > self.size:
            raise self._bad(f"{n} bytes at {at} lie beyond the end of the file")
        data = os.pread(self.fd, n, at)
        if len(data) != n:
            raise self._bad(f"{n} bytes at {at} lie beyond the end of the file")
        return data

    def _uint(self, at: int, width: int) -> int:
        return int.from_bytes(self._bytes(at, width), "little")

    def _superblock(self) -> None:
        if self._bytes(0, 8) != SIGNATURE:
            raise self._bad("no HDF5 signature at byte 0")
        version = self._uint(8, 1)
        if version in (0, 1):
            self.O, self.L = self._uint(13, 1), self._uint(14, 1)
            pos = 24 + (4 if version == 1 else 0)
            self.base = self._uint(pos, self.O)
            entry = pos + 4 * self.O  # base, free space, end of file, driver info
            self.root = self._uint(entry + self.O, self.O)
        elif version in (2, 3):
            self.O, self.L = self._uint(9, 1), self._uint(10, 1)
            self.base = self._uint(12, self.O)
            self.root = self._uint(12 + 3 * self.O, self.O)  # base, extension, end of file, root object header
        else:
            raise Unsupported(f"{self.path}: HDF5 superblock version {version} needs h5py to read")
        if self.O not in (2, 4, 8) or self.L not in (2, 4, 8) or self.base != 0:
            raise self._bad(f"superblock sizes {self.O}/{self.L}, base address {self.base}")

    # ------------------------------------------------------------------ object headers
    def messages(self, addr: int) -> list[tuple[int, bytes]]:
        """Every message ``(type, body)`` of the object header at ``addr``, continuation blocks included."""
        if self._bytes(addr, 4) == b"OHDR":
            return self._messages_v2(addr)
        if self._uint(addr, 1) != 1:
            raise self._bad(f"object header at {addr} has version {self._uint(addr, 1)}")
        chunks = [(addr + 16, self._uint(addr + 8, 4))]
        out: list[tuple[int, bytes]] = []
        seen = 0
        while chunks:
            seen += 1
            if seen > _MAX_CHUNKS:
                raise self._bad("object header continuations loop")
            start, length = chunks.pop(0)
            pos, end = start, start + length
            while pos + 8 <= end:
                mtype, msize, flags = self._uint(pos, 2), self._uint(pos + 2, 2), self._uint(pos + 4, 1)
                body = self._bytes(pos + 8, msize)
                pos += 8 + msize
                self._collect(mtype, flags, body, out, chunks)
        return out

    def _messages_v2(self, addr: int) -> list[tuple[int, bytes]]:
        if self._uint(addr + 4, 1) != 2:
            raise self._bad(f"object header at {addr} has version {self._uint(addr + 4, 1)}")
        flags = self._uint(addr + 5, 1)
        pos = addr + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        length = self._uint(pos, width)
        order = bool(flags & 0x04)
        chunks = [(pos + width, length)]
        out: list[tuple[int, bytes]] = []
        seen = 0
        while chunks:
            seen += 1
            if seen > _MAX_CHUNKS:
                raise self._bad("object header continuations loop")
            start, length = chunks.pop(0)
            if seen > 1:
                if self._bytes(start, 4) != b"OCHK":
                    raise self._bad(f"no OCHK signature at {start}")
                start, length = start + 4, length - 8  # signature, checksum
            pos, end = start, start + length
            while pos + 4 + (2 if order else 0) <= end:
                mtype, msize, mflags = self._uint(pos, 1), self._uint(pos + 1, 2), self._uint(pos + 3, 1)
                pos += 4 + (2 if order else 0)
                body = self._bytes(pos, msize)
                pos += msize
                self._collect(mtype, mflags, body, out, chunks)
        return out

    def _collect(self, mtype: int, flags: int, body: bytes, out: list, chunks: list) -> None:
        if mtype == _MSG_CONTINUATION:
            chunks.append((int.from_bytes(body[:self.O], "little"),
                           int.from_bytes(body[self.O:self.O + self.L], "little")))
        elif mtype != 0:
            if flags & 0x02:  # shared message: stored elsewhere
                raise Unsupported(f"{self.path}: shared HDF5 object header messages need h5py to read")
            out.append((mtype, body))

    # ------------------------------------------------------------------ groups
    def lookup(self, path: str) -> int | None:
        """Object header address of the object at ``path`` ("/a/b"), or None if there is none."""
        addr = self.root
        for name in filter(None, path.split("/")):
            found = self._child(addr, name)
            if found is None:
                return None
            addr = found
        return addr

    def _child(self, addr: int, name: str) -> int | None:
        children = self._children.get(addr)
        if children is None:
            children = self._children[addr] = self.children(addr)
        return children.get(name.encode())

    def children(self, addr: int) -> dict[bytes, int]:
        """Every hard link of the group at ``addr``: name (bytes) -> object header address, in one pass over its
        symbol table or link messages (a group of 10,000 datasets is read once, not once per lookup)."""
        msgs = self.messages(addr)
        for mtype, body in msgs:
            if mtype == _MSG_SYMBOL_TABLE:
                btree, heap = int.from_bytes(body[:self.O], "little"), int.from_bytes(body[self.O:2 * self.O], "little")
                return self._symbol_table_children(btree, heap)
        for mtype, body in msgs:
            if mtype == _MSG_LINK_INFO and int.from_bytes(body[2 + (8 if body[1] & 1 else 0):][:self.O],
                                                          "little") != UNDEFINED:
                raise Unsupported(f"{self.path}: HDF5 groups with dense link storage need h5py to read")
        out: dict[bytes, int] = {}
        for mtype, body in msgs:
            link = _link(body, self.O) if mtype == _MSG_LINK else None
            if link is not None:
                out.setdefault(link[0].encode(), link[1])
        return out

    def _symbol_table_children(self, btree: int, heap: int) -> dict[bytes, int]:
        if self._bytes(heap, 4) != b"HEAP":
            raise self._bad(f"no local heap at {heap}")
        heap_size = self._uint(heap + 8, self.L)
        heap_data = self._uint(heap + 8 + 2 * self.L, self.O)
        names = self._bytes(heap_data, heap_size)
        out: dict[bytes, int] = {}
        stack, visited = [btree], set()
        entry_size = 2 * self.O + 24
        while stack:
            node = stack.pop()
            if node in visited or len(visited) > _MAX_CHUNKS:
                raise self._bad("group B-tree loops")
            visited.add(node)
            if self._bytes(node, 4) != b"TREE" or self._uint(node + 4, 1) != 0:
                raise self._bad(f"no group B-tree node at {node}")
            level, entries = self._uint(node + 5, 1), self._uint(node + 6, 2)
            first = node + 8 + 2 * self.O + self.L  # signature, type, level, entries, siblings, key 0
            keyed = self._bytes(first, entries * (self.O + self.L))  # (one read per node: child, key, ...)
            children = [int.from_bytes(keyed[i * (self.O + self.L):i * (self.O + self.L) + self.O], "little")
                        for i in range(entries)]
            if level > 0:
                stack += children
                continue
            for snod in children:
                if self._bytes(snod, 4) != b"SNOD":
                    raise self._bad(f"no symbol table node at {snod}")
                count = self._uint(snod + 6, 2)
                table = self._bytes(snod + 8, count * entry_size)
                for i in range(count):
                    entry = i * entry_size
                    offset = int.from_bytes(table[entry:entry + self.O], "little")
                    end = names.find(b"\0", offset)
                    if offset >= len(names) or end < 0:
                        raise self._bad("a link name lies outside its local heap")
                    out.setdefault(names[offset:end], int.from_bytes(table[entry + self.O:entry + 2 * self.O],
                                                                     "little"))
        return out

    def datatype_message(self, addr: int) -> bytes | None:
        """The body of the datatype message of the object header at ``addr`` (None: it has none), as stored
        (padded to the header's alignment)."""
        return next((body for mtype, body in self.messages(addr) if mtype == _MSG_DATATYPE), None)

    # ------------------------------------------------------------------ attributes and datasets
    def attrs(self, addr: int) -> dict[str, Any]:
        """The attributes of the object at ``addr`` that this parser can decode (numbers and fixed strings)."""
        out: dict[str, Any] = {}
        msgs = self.messages(addr)
        for mtype, body in msgs:
            if mtype == _MSG_ATTRIBUTE_INFO:
                heap = int.from_bytes(body[2 + (2 if body[1] & 1 else 0):][:self.O], "little")
                if heap != UNDEFINED:
                    raise Unsupported(f"{self.path}: HDF5 dense attribute storage needs h5py to read")
            if mtype != _MSG_ATTRIBUTE:
                continue
            version = body[0]
            nlen, tlen, slen = struct.unpack_from("<HHH", body, 2)
            pad = (lambda n: (n + 7) // 8 * 8) if version == 1 else (lambda n: n)
            pos = 8 + (1 if version == 3 else 0)
            name = body[pos:pos + nlen].split(b"\0", 1)[0].decode(errors="replace")
            pos += pad(nlen)
            dtype = _datatype(body[pos:pos + tlen])
            pos += pad(tlen)
            shape = self._dataspace(body[pos:pos + slen])
            pos += pad(slen)
            if dtype is None or shape is None:
                continue
            n = math.prod(shape) * dtype.itemsize
            if pos + n > len(body):
                raise self._bad(f"attribute {name!r} is longer than its message")
            value = np.frombuffer(body[pos:pos + n], dtype).reshape(shape)
            out[name] = value[()] if shape == () else value
        return out

    def dataset(self, addr: int) -> Dataset:
        shape: tuple[int, ...] | None = None
        dtype = None
        address = None
        compact = None
        for mtype, body in self.messages(addr):
            if mtype == _MSG_DATASPACE:
                shape = self._dataspace(body)
            elif mtype == _MSG_DATATYPE:
                dtype = _datatype(body)
            elif mtype == _MSG_LAYOUT:
                if body[0] not in (3, 4):
                    raise Unsupported(f"{self.path}: HDF5 data layout message version {body[0]} needs h5py to read")
                if body[1] == 1:
                    address = int.from_bytes(body[2:2 + self.O], "little")
                    address = None if address == UNDEFINED else address
                elif body[1] == 0:
                    n = int.from_bytes(body[2:4], "little")
                    compact = body[4:4 + n]
                else:
                    raise Unsupported(f"{self.path}: chunked or virtual HDF5 datasets need h5py to read")
        if shape is None:
            raise self._bad(f"the object at {addr} is not a dataset")
        return Dataset(shape, dtype, address, compact)

    def read(self, ds: Dataset) -> np.ndarray:
        """The values of a (small) dataset."""
        if ds.dtype is None:
            raise Unsupported(f"{self.path}: an HDF5 datatype this parser does not decode")
        n = math.prod(ds.shape) * ds.dtype.itemsize
        raw = ds.compact if ds.compact is not None else (self._bytes(ds.address, n) if ds.address is not None
                                                          else bytes(n))
        if len(raw) < n:
            raise self._bad("compact data is shorter than its dataset")
        return np.frombuffer(raw[:n], ds.dtype).reshape(ds.shape)

    def _dataspace(self, body: bytes) -> tuple[int, ...] | None:
        version, rank, flags = body[0], body[1], body[2]
        if version == 1:
            pos = 8
        elif version == 2:
            if body[3] == 2:  # null dataspace
                return None
            pos = 4
        else:
            raise self._bad(f"dataspace version {version}")
        dims = tuple(int.from_bytes(body[pos + i * self.L:pos + (i + 1) * self.L], "little") for i in range(rank))
        if len(body) < pos + rank * self.L or any(d > self.size * 8 for d in dims):
            raise self._bad("dataspace dimensions")
        _ = flags
        return dims


def _datatype(body: bytes) -> np.dtype | None:
    """The numpy dtype of a datatype message (integers, floats, fixed strings), None for any other."""
    if len(body) < 8:
        return None
    cls, bits, size = body[0] & 0x0F, body[1], int.from_bytes(body[4:8], "little")
    order = ">" if bits & 1 else "<"
    if cls == 0 and size in (1, 2, 4, 8):
        return np.dtype(f"{order}{'i' if bits & 0x08 else 'u'}{size}")
    if cls == 1 and size in (2, 4, 8):
        return np.dtype(f"{order}f{size}")
    if cls == 3 and size > 0:
        return np.dtype(f"S{size}")
    return None


def _link(body: bytes, offset_size: int) -> tuple[str, int] | None:
    """(name, object header address) of a hard link message, None for a soft or external one."""
    flags = body[1]
    pos = 2
    ltype = 0
    if flags & 0x08:
        ltype = body[pos]
        pos += 1
    pos += 8 if flags & 0x04 else 0
    pos += 1 if flags & 0x10 else 0
    width = 1 << (flags & 3)
    n = int.from_bytes(body[pos:pos + width], "little")
    pos += width
    name = body[pos:pos + n].decode(errors="replace")
    pos += n
    if ltype != 0:  # soft or external: ckptio writes none
        return None
    return name, int.from_bytes(body[pos:pos + offset_size], "little")
