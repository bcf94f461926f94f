"""The generated PNG and WAV files are real, decodable files."""

from __future__ import annotations

import io
import struct
import wave
import zlib

from colabhive_mcp.sandbox.media import PNG_SIGNATURE, png, wav


def _png_chunks(data: bytes) -> dict[bytes, bytes]:
    chunks, at = {}, len(PNG_SIGNATURE)
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        tag, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(tag + body)
        chunks[tag] = chunks.get(tag, b"") + body
        at += 12 + length
    return chunks


def test_png_has_valid_chunks_and_pixels() -> None:
    data = png(20, 12, "seed")
    assert data.startswith(PNG_SIGNATURE)
    chunks = _png_chunks(data)
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (width, height, depth, colour) == (20, 12, 8, 2)
    assert len(zlib.decompress(chunks[b"IDAT"])) == height * (1 + 3 * width)
    assert b"IEND" in chunks


def test_png_depends_on_seed_only() -> None:
    assert png(8, 8, "a") == png(8, 8, "a")
    assert png(8, 8, "a") != png(8, 8, "b")


def test_wav_opens_with_the_wave_module() -> None:
    with wave.open(io.BytesIO(wav(440.0, seconds=0.25, rate=8000))) as audio:
        assert (audio.getnchannels(), audio.getsampwidth(), audio.getframerate()) == (1, 2, 8000)
        assert audio.getnframes() == 2000
