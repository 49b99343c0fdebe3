"""Sparse files by their data: the ranges of a file that hold data (the rest are holes, read as zeros), and a
reader of those ranges one after another, so that an archive carries a 1 GB file of holes as its few data bytes."""

from __future__ import annotations

import io
import os

SPARSE = "SKILLOPT.sparse"  # the pax record of a sparse member: [its full size, [[offset, length], ...] of its data]


def data_ranges(fd: int, size: int) -> list[list[int]]:
    """[offset, length] of each run of data in the open file `fd` of `size` bytes, in order."""
    ranges: list[list[int]] = []
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # no data after pos
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        ranges.append([start, end - start])
        pos = end
    return ranges


class RangeReader(io.RawIOBase):
    """The data of `ranges` of the open file `fd`, read one range after another."""

    def __init__(self, fd: int, ranges: list[list[int]]):
        self.fd, self.ranges, self.at = fd, [list(r) for r in ranges], 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[no-untyped-def, override]
        while self.ranges and self.at >= self.ranges[0][1]:
            self.ranges.pop(0)
            self.at = 0
        if not self.ranges:
            return 0
        start, length = self.ranges[0]
        data = os.pread(self.fd, min(len(buf), length - self.at), start + self.at)
        if not data:
            raise OSError("a sparse file shrank while it was read")
        buf[: len(data)] = data
        self.at += len(data)
        return len(data)
