"""Read what a matplotlib figure saved as SVG actually drew: its markers (centre, radius,
style, the ids of the groups around it, the clip rectangle that bounds it) and its texts.

Tests check the data behind a figure this way (which points are inside the axes, where a
tick label sits against its points), not the pixels. Text is kept as text by saving with
`svg.fonttype = "none"`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NS = "{http://www.w3.org/2000/svg}"
HREF = "{http://www.w3.org/1999/xlink}href"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    r: float  # half the larger side of its bounding box
    style: str
    groups: tuple[str, ...]  # ids of the <g> elements around it, outermost first
    clip: tuple[float, float, float, float] | None  # x0, y0, x1, y1 of its clip rectangle
    curved: bool  # a circle (Bezier curves), not a tick or a cap

    def inside(self, tol: float = 0.01) -> bool:
        """Its centre lies within its clip rectangle (the axes it is drawn in)."""
        if self.clip is None:
            return True
        x0, y0, x1, y1 = self.clip
        return x0 - tol <= self.x <= x1 + tol and y0 - tol <= self.y <= y1 + tol


@dataclass(frozen=True)
class Text:
    text: str
    x: float
    y: float
    groups: tuple[str, ...]


def _bbox(d: str) -> tuple[float, float, float, float]:
    xy = np.array(_NUMBER.findall(d), dtype=float).reshape(-1, 2)
    return xy[:, 0].min(), xy[:, 1].min(), xy[:, 0].max(), xy[:, 1].max()


def read(path: Path) -> tuple[list[Mark], list[Text]]:
    """Every path or marker (`<use>`) and every text of an SVG file written by matplotlib."""
    root = ET.parse(path).getroot()
    clips = {}
    for c in root.iter(f"{NS}clipPath"):
        rect = c.find(f"{NS}rect")
        if rect is not None:
            x, y = float(rect.get("x")), float(rect.get("y"))
            clips[c.get("id")] = (x, y, x + float(rect.get("width")), y + float(rect.get("height")))
    defs = {p.get("id"): p.get("d") for p in root.iter(f"{NS}path") if p.get("id")}
    marks: list[Mark] = []
    texts: list[Text] = []

    def walk(el, groups: tuple[str, ...], clip):
        ref = el.get("clip-path")
        if ref:
            clip = clips.get(ref[len("url(#"):-1], clip)
        tag = el.tag[len(NS):]
        if tag == "g" and el.get("id"):
            groups = (*groups, el.get("id"))
        if tag == "defs" or tag == "clipPath":
            return
        if tag == "path" and el.get("d"):
            x0, y0, x1, y1 = _bbox(el.get("d"))
            marks.append(Mark((x0 + x1) / 2, (y0 + y1) / 2, max(x1 - x0, y1 - y0) / 2,
                              el.get("style", ""), groups, clip, "C" in el.get("d")))
        elif tag == "use":
            d = defs[el.get(HREF).lstrip("#")]
            x0, y0, x1, y1 = _bbox(d)
            ox, oy = float(el.get("x", 0)), float(el.get("y", 0))
            marks.append(Mark(ox + (x0 + x1) / 2, oy + (y0 + y1) / 2, max(x1 - x0, y1 - y0) / 2,
                              el.get("style", ""), groups, clip, "C" in d))
        elif tag == "text":  # math text: tspans in a translated group (position not kept)
            texts.append(Text("".join(el.itertext()).strip(), float(el.get("x", "nan")),
                              float(el.get("y", "nan")), groups))
        for child in el:
            walk(child, groups, clip)

    walk(root, (), None)
    return marks, texts


def styled(marks: list[Mark], *parts: str) -> list[Mark]:
    """The marks whose style holds every one of `parts` (e.g. "fill: none", "stroke: #d62728")."""
    return [m for m in marks if all(p in m.style for p in parts)]
