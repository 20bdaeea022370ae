"""Large byte fields written next to the encoded response instead of through the encoder.

A Fetch response is mostly record batches read from the log. Passing them through kio's encoder
copies every byte twice (into the encoder's buffer, then into the joined frame). Instead a handler
parks each large blob here and puts a short random marker in its place; the response is encoded
with the markers, and ``splice`` cuts the encoded frame at each marker, fixes the length prefix in
front of it and returns a list of buffers for ``transport.writelines``: the blobs go to the socket
as the objects that were read from disk.

Kafka byte fields carry only their own length (arrays count elements, not bytes), so swapping a
field's contents changes nothing else in the frame but the frame's size prefix.
"""

from __future__ import annotations

import os
import struct

from strom.protocol import fastwrite

# Blobs smaller than this stay in the encoded frame: a separate buffer costs more than the copy.
MIN_SPLICE = 4096
# Key under which a handler's result dict carries its BlobSplicer (not a Kafka field; build() skips it).
RESULT_KEY = "_spliced_blobs"

_INT32 = struct.Struct(">i")
_MARKER_SIZE = 16


class BlobSplicer:
    """Collects the blobs of one response and swaps them back in after encoding."""

    __slots__ = ("_prefix", "_blobs")

    def __init__(self) -> None:
        # A random prefix per response: a marker cannot occur by chance in the rest of the frame.
        self._prefix = os.urandom(_MARKER_SIZE - 4)
        self._blobs: list[bytes] = []

    def __len__(self) -> int:
        return len(self._blobs)

    def hold(self, blob: bytes) -> bytes:
        """The value to encode in ``blob``'s place (``blob`` itself when it is small)."""
        if len(blob) < MIN_SPLICE:
            return blob
        marker = self._prefix + _INT32.pack(len(self._blobs))
        self._blobs.append(blob)
        return marker

    def splice(self, frame: bytes, *, compact: bool) -> list[bytes | memoryview]:
        """``frame`` (size-prefixed, encoded with the markers) as buffers with the blobs in place.

        ``compact``: the byte fields use the flexible versions' unsigned-varint length (length + 1);
        otherwise an int32 length.
        """
        view = memoryview(frame)
        parts: list[bytes | memoryview] = []
        pos = 0
        size = len(frame) - 4
        marker_prefix_len = 1 if compact else 4  # a 16-byte marker's own length prefix
        for index, blob in enumerate(self._blobs):
            at = frame.find(self._prefix + _INT32.pack(index), pos)
            if at < 0:
                raise ValueError(f"spliced blob {index} not found in the encoded response")
            length_prefix = _length_prefix(len(blob), compact)
            parts += (view[pos : at - marker_prefix_len], length_prefix, blob)
            size += len(length_prefix) + len(blob) - marker_prefix_len - _MARKER_SIZE
            pos = at + _MARKER_SIZE
        parts.append(view[pos:])
        head = bytearray(parts[0])
        _INT32.pack_into(head, 0, size)
        parts[0] = bytes(head)
        return parts


def _length_prefix(length: int, compact: bool) -> bytes:
    return fastwrite.uvarint(length + 1) if compact else _INT32.pack(length)
