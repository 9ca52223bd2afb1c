"""What an audio file carries beside its sound, and the sound alone.

AGL1K's clips are the Internet Archive's MP3s as uploaded, and their ID3 tags name their place
(the Essaouira clip's COMM frame holds the date, the street, the city, the country and the
coordinates). `tags` reads every container tag mutagen knows (ID3v1/v2, APEv2, Vorbis
comments, RIFF INFO, MP4 atoms); `strip` returns the file's bytes with no container metadata,
without re-encoding:

* MP3: the ID3v2 tags in front (and one appended with a footer), the ID3v1 trailer (and its
  `TAG+` extension), APEv2 and Lyrics3v2 are cut off: what is left is a slice of the original,
  so every MPEG frame (the LAME/Xing info frame included, which holds encoder settings only)
  is byte-identical and decodes to the same samples.
* WAV: the RIFF is rebuilt with its `fmt `, `fact` and `data` chunks only (LIST/INFO, `id3 `,
  `bext`, `iXML`, cue points and any other chunk dropped); the sample bytes are unchanged.
* FLAC: STREAMINFO and SEEKTABLE are kept, every other metadata block (VORBIS_COMMENT,
  PICTURE, APPLICATION, CUESHEET, PADDING) dropped; the frames are unchanged.
* Ogg Vorbis / Opus, MP4 (m4a): mutagen empties the comment packet or the `ilst` atom; the
  audio packets are unchanged (Ogg pages are renumbered and their CRCs recomputed).

Any other container cannot be stripped here: `strip` raises `ContainerError` (the caller sends
nothing rather than a file whose metadata it cannot vouch for).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path

from agl.errors import AglError

STRIPPABLE = (".mp3", ".wav", ".flac", ".ogg", ".opus", ".oga", ".m4a", ".mp4")


class ContainerError(AglError):
    """A file whose metadata cannot be removed without re-encoding (or a malformed one)."""


@dataclass(frozen=True)
class Tag:
    """One metadata field: where it lives (`ID3v2.3`, `ID3v1`, `APEv2`, `Vorbis`, `RIFF INFO`,
    `MP4`), its key (`TIT2`, `COMM::eng`, `title`, `INAM`) and its text."""

    kind: str
    key: str
    text: str


# ------------------------------------------------------------------------------------- strip
def strip(data: bytes, suffix: str) -> bytes:
    """`data` (a file of type `suffix`, e.g. ".mp3") without container metadata (see above)."""
    suffix = suffix.lower()
    if suffix == ".mp3":
        return strip_mp3(data)
    if suffix == ".wav":
        return strip_wav(data)
    if suffix == ".flac":
        return strip_flac(strip_mp3_edges(data))
    if suffix in (".ogg", ".opus", ".oga", ".m4a", ".mp4"):
        return _strip_mutagen(data, suffix)
    raise ContainerError(f"cannot remove the tags of a '{suffix}' file without re-encoding; "
                         f"convert it to one of {', '.join(STRIPPABLE)}")


def strip_mp3(data: bytes) -> bytes:
    """An MP3's MPEG frames alone: a slice of `data`, so every frame is byte-identical."""
    return strip_mp3_edges(data)


def strip_mp3_edges(data: bytes) -> bytes:
    start, end = _id3v2_front(data), len(data)
    while True:  # trailers come in any order: ID3v1 last by convention, APEv2/Lyrics3 before it
        cut = _trailer(data, start, end)
        if cut == end:
            return data[start:end]
        end = cut


def _syncsafe(b: bytes) -> int:
    return (b[0] & 0x7F) << 21 | (b[1] & 0x7F) << 14 | (b[2] & 0x7F) << 7 | (b[3] & 0x7F)


def _id3v2_front(data: bytes) -> int:
    """Where the audio starts after every ID3v2 tag in front (several can be chained)."""
    pos = 0
    while data[pos:pos + 3] == b"ID3" and len(data) >= pos + 10:
        size = _syncsafe(data[pos + 6:pos + 10])
        footer = 10 if data[pos + 5] & 0x10 else 0
        pos += 10 + size + footer
    # Some taggers pad after the tag with zeros the tag's size does not count.
    while pos < len(data) and data[pos] == 0:
        pos += 1
    return min(pos, len(data))


def _trailer(data: bytes, start: int, end: int) -> int:
    """`end` moved before one trailing tag, or `end` itself when none ends there."""
    if end - start >= 128 and data[end - 128:end - 125] == b"TAG":
        end -= 128  # ID3v1
        if end - start >= 227 and data[end - 227:end - 223] == b"TAG+":
            end -= 227  # ID3v1 enhanced
        return end
    if end - start >= 32 and data[end - 32:end - 24] == b"APETAGEX":
        size, flags = struct.unpack("<I4xI", data[end - 20:end - 8])  # footer: size, flags
        header = 32 if flags & 0x80000000 else 0
        return max(start, end - size - header)
    if end - start >= 15 and data[end - 9:end] == b"LYRICS200":
        try:
            size = int(data[end - 15:end - 9])
        except ValueError:
            return end
        return max(start, end - 15 - size)
    if end - start >= 10 and data[end - 10:end - 7] == b"3DI":  # ID3v2.4 appended, footer
        size = _syncsafe(data[end - 4:end])
        return max(start, end - 20 - size)
    return end


def strip_wav(data: bytes) -> bytes:
    """A RIFF/WAVE with its `fmt `, `fact` and `data` chunks only."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ContainerError("not a RIFF/WAVE file")
    pos, kept = 12, []
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        body_end = min(len(data), pos + 8 + size)
        if cid in (b"fmt ", b"fact", b"data"):
            chunk = data[pos:body_end]
            kept.append(chunk + (b"\0" if len(chunk) % 2 else b""))
        pos = pos + 8 + size + (size & 1)
    if not any(c[:4] == b"data" for c in kept):
        raise ContainerError("WAVE file without a data chunk")
    body = b"WAVE" + b"".join(kept)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def strip_flac(data: bytes) -> bytes:
    """A FLAC stream with STREAMINFO and SEEKTABLE as its only metadata blocks."""
    if data[:4] != b"fLaC":
        raise ContainerError("not a FLAC stream")
    pos, blocks = 4, []
    while pos + 4 <= len(data):
        head = data[pos]
        kind, size = head & 0x7F, int.from_bytes(data[pos + 1:pos + 4], "big")
        if kind in (0, 3):
            blocks.append([kind, data[pos + 4:pos + 4 + size]])
        pos += 4 + size
        if head & 0x80:
            break
    if not blocks or blocks[0][0] != 0:
        raise ContainerError("FLAC stream without STREAMINFO")
    out = [b"fLaC"]
    for i, (kind, body) in enumerate(blocks):
        last = 0x80 if i == len(blocks) - 1 else 0
        out.append(bytes([kind | last]) + len(body).to_bytes(3, "big") + body)
    return b"".join(out) + data[pos:]


def _strip_mutagen(data: bytes, suffix: str) -> bytes:
    import mutagen

    buf = io.BytesIO(data)
    try:
        f = mutagen.File(buf)
        if f is None:
            raise ContainerError(f"not a readable '{suffix}' file")
        if f.tags is not None:
            buf.seek(0)
            f.delete(buf)
    except mutagen.MutagenError as exc:
        raise ContainerError(f"cannot read the '{suffix}' container: {exc}") from None
    return buf.getvalue()


# -------------------------------------------------------------------------------------- read
def tags(path: str | Path) -> list[Tag]:
    """Every metadata field of the file at `path`, as text (pictures and binary frames by
    their key and size only). An unreadable or untagged file has none."""
    return tags_of(Path(path).read_bytes())


def tags_of(data: bytes) -> list[Tag]:
    """`tags` of a file's bytes: ID3v2 (any position mutagen finds), ID3v1, APEv2, and the
    container's own (Vorbis comments, RIFF INFO, MP4 atoms)."""
    import mutagen
    from mutagen.apev2 import APENoHeaderError, APEv2
    from mutagen.id3 import ID3, ID3NoHeaderError

    out: list[Tag] = []
    try:
        id3 = ID3(io.BytesIO(data), load_v1=False)  # ID3v1 read below, field by field
        version = f"ID3v2.{id3.version[1]}"
        out.extend(Tag(version, key, _frame_text(frame)) for key, frame in id3.items())
    except (ID3NoHeaderError, mutagen.MutagenError, ValueError):
        pass
    if len(data) >= 128 and data[-128:-125] == b"TAG":
        out.extend(_id3v1(data[-128:]))
    try:
        for key, value in APEv2(io.BytesIO(data)).items():
            out.append(Tag("APEv2", key, str(value)))
    except (APENoHeaderError, mutagen.MutagenError, ValueError):
        pass
    if data[:4] == b"RIFF":
        out.extend(_riff_info(data))
    elif data[:3] != b"ID3" and data[:1] != b"\xff":
        try:
            f = mutagen.File(io.BytesIO(data))
        except (mutagen.MutagenError, ValueError, struct.error):
            f = None
        if f is not None and f.tags is not None:
            kind = type(f.tags).__name__.replace("VCommentDict", "Vorbis").replace("Tags", "")
            for key, value in f.tags.items():
                vals = value if isinstance(value, list) else [value]
                out.append(Tag(kind or "tags", str(key), " / ".join(_short(v) for v in vals)))
    return out


def _frame_text(frame) -> str:
    text = getattr(frame, "text", None)
    if text is not None:
        return " / ".join(str(t) for t in text)
    if getattr(frame, "url", None):
        return str(frame.url)
    data = getattr(frame, "data", None)
    if isinstance(data, bytes | bytearray):
        return f"<{len(data)} bytes>"
    return str(frame)


def _short(v) -> str:
    return f"<{len(v)} bytes>" if isinstance(v, bytes | bytearray) else str(v)


def _id3v1(t: bytes) -> list[Tag]:
    fields = (("title", 3, 33), ("artist", 33, 63), ("album", 63, 93), ("year", 93, 97),
              ("comment", 97, 127))
    out = []
    for key, a, b in fields:
        text = t[a:b].split(b"\0")[0].decode("latin-1").strip()
        if text:
            out.append(Tag("ID3v1", key, text))
    return out


def _riff_info(data: bytes) -> list[Tag]:
    """RIFF LIST/INFO fields (INAM, ICMT, ICRD, ...), and an `id3 ` chunk's frames."""
    out: list[Tag] = []
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        body = data[pos + 8:pos + 8 + size]
        if cid == b"LIST" and body[:4] == b"INFO":
            q = 4
            while q + 8 <= len(body):
                fid, fsize = body[q:q + 4], struct.unpack("<I", body[q + 4:q + 8])[0]
                text = body[q + 8:q + 8 + fsize].split(b"\0")[0].decode("latin-1").strip()
                out.append(Tag("RIFF INFO", fid.decode("latin-1"), text))
                q += 8 + fsize + (fsize & 1)
        elif cid.lower() == b"id3 ":
            out.extend(Tag(t.kind, t.key, t.text) for t in tags_of(body))
        elif cid not in (b"fmt ", b"data", b"fact"):
            out.append(Tag("RIFF", cid.decode("latin-1"), f"<{size} bytes>"))
        pos += 8 + size + (size & 1)
    return out
