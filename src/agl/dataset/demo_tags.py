"""Container tags planted in demo clips: ID3 and APEv2 tags that name a place, as published files do.

agl.dataset.demo plants them in a few clips (its PLANTED_TAGS) so that the tag audit and the
`tags` intervention have something to find (docs/inference.md#what-reaches-a-model).
"""

from __future__ import annotations

import io


def plant_tags(mp3: bytes, how: str, fields: tuple[tuple[str, str], ...]) -> bytes:
    """`mp3` with the container tags `how` names (`id3v2.3+id3v1`, `id3v2.4`, `apev2`) holding
    `fields`; the MPEG frames untouched (mutagen writes in memory, no padding: same bytes
    every time)."""
    from mutagen.apev2 import APEv2
    from mutagen.id3 import COMM, ID3, TIT2, TPE1

    buf = io.BytesIO(mp3)
    if how.startswith("id3"):
        frames = {"TIT2": TIT2, "TPE1": TPE1}
        tag = ID3()
        for key, text in fields:
            if key == "COMM":
                tag.add(COMM(encoding=3, lang="eng", desc="", text=[text]))
            else:
                tag.add(frames[key](encoding=3, text=[text]))
        tag.save(buf, v1=2 if "id3v1" in how else 0, v2_version=3 if "2.3" in how else 4,
                 padding=lambda info: 0)
    elif how == "apev2":
        tag = APEv2()
        for key, text in fields:
            tag[key] = text
        tag.save(buf)
    else:
        raise ValueError(f"unknown tag kind {how}")
    return buf.getvalue()
