"""The report's section "What the files carry": the tag audit `agl download` wrote beside the
manifest (`tag_audit.csv`, agl.dataset.tag_audit): how many clips carry their place in
their container tags or their file name, and which, with the tag and the words. None (no
trace on the page) where the dataset folder has no audit.

It says what a run could have read besides the sound: nothing under the controlled protocol
(every backend sends the audio frames alone, and no file name); a run marked on the
leaderboard as sent with its files' tags (the paper protocol, the `tags` intervention)
received them.
"""

from __future__ import annotations

import html

import pandas as pd

from agl.core import canonical
from agl.report.sections import SectionContext
from agl.report.tables import frame_table

TABLE = "tag_audit.csv"  # agl.dataset.tag_audit.TABLE, beside the manifest
INTRO = ("AGL1K's clips are the Internet Archive's MP3s as their recordists uploaded them, and "
         "their container tags (ID3, APEv2) and file names can name the place: a title with the "
         "city, a comment with the coordinates. <code>agl download</code> reads every clip's "
         "tags and file name and compares them with the clip's true city, country, continent "
         "and coordinates (docs/data.md#what-the-files-carry). Under the "
         "controlled protocol none of this reaches a model: every backend sends the audio "
         "frames alone, without tags, and never a file name; a run marked as sent with its "
         "files' tags (the paper protocol, the <code>tags</code> intervention) received them.")


def _line(frame: pd.DataFrame) -> str:
    n = len(frame)
    in_tags = int((frame["place_in_tags"].fillna("") != "").sum())
    in_name = int((frame["place_in_name"].fillna("") != "").sum())
    tagged = int((frame["n_tags"] > 0).sum())
    return (f"{in_tags} of {n} clips carry their place in their tags; {in_name} in their file "
            f"name ({tagged} carry tags of any kind).")


def section(ctx: SectionContext) -> str | None:
    if ctx.inputs.manifest is None or not (ctx.inputs.manifest.parent / TABLE).is_file():
        return None
    frame = pd.read_csv(ctx.inputs.manifest.parent / TABLE, dtype={"tags": str, "evidence": str},
                        keep_default_na=False)
    if frame.empty:
        return None
    frame["n_tags"] = pd.to_numeric(frame["n_tags"], errors="coerce").fillna(0).astype(int)
    shown = frame[(frame["place_in_tags"] != "") | (frame["place_in_name"] != "")]
    shown = shown[["key", "tags", "place_in_tags", "place_in_name", "evidence"]].rename(columns={
        "place_in_tags": "place in tags", "place_in_name": "place in file name"})
    canonical.write_csv(shown, ctx.tables / "tag_audit.csv")
    body = frame_table(shown, "tag-audit-table") if len(shown) else ""
    return ("<section id='tags-section'><h2>What the files carry</h2>"
            f"<p>{INTRO}</p><p><b>{html.escape(_line(frame))}</b></p>"
            f"{body}</section>")
