"""Real PNG and WAV bytes, generated with the standard library only."""

from __future__ import annotations

import hashlib
import io
import math
import struct
import wave
import zlib

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def png(width: int, height: int, seed: str = "") -> bytes:
    """An 8-bit RGB PNG: a diagonal gradient between two colours derived from ``seed``."""
    digest = hashlib.sha256(seed.encode()).digest()
    start, end = digest[0:3], digest[3:6]
    span = max(1, width + height - 2)
    rows = bytearray()
    for y in range(height):
        rows.append(0)  # filter type "None" for this scanline
        for x in range(width):
            t = (x + y) / span
            rows.extend(round(a + (b - a) * t) for a, b in zip(start, end))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(bytes(rows)))
        + _png_chunk(b"IEND", b"")
    )


def wav(frequency: float = 440.0, seconds: float = 0.5, rate: int = 8000) -> bytes:
    """A mono 16-bit PCM WAV file holding a sine tone."""
    frames = b"".join(
        struct.pack("<h", round(12000 * math.sin(2 * math.pi * frequency * i / rate)))
        for i in range(int(seconds * rate))
    )
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(frames)
    return buffer.getvalue()
