"""Does a clip's file give its answer away? Its tags and its file name, against the truth.

AGL1K's MP3s carry the uploader's ID3 tags (a title naming the city, a comment with the
coordinates), and 242 of its 1,444 file names hold the true city (`PrestonStation.mp3`). For
every clip this reads the container's tags (`agl.core.container.tags`: ID3v1/v2, APEv2,
Vorbis comments, RIFF INFO, MP4 atoms) and splits its file name into words, and says whether
either names the clip's true city, country or continent, holds coordinates within
`radius_km` of the truth, or holds a date. `agl download` writes the table beside the data
(`data/tag_audit.csv`), `agl audit tags` does it for any folder, and the report says how many.

How a place is found (docs/data.md#what-the-files-carry): text is folded to lower-case ASCII
letters and digits (accents dropped, `Médina` → `medina`) and split into words, a file name
also at lower→upper case and letter↔digit changes (`20020207EssaouiraRempartsMuezzin` →
`20020207 essaouira remparts muezzin`). A name matches where its words appear in a row (in a
file name also run together at the start of a word, for 4 letters or more: `norwichmarket`), or,
for a city of several words (`Berlin Treptow`), where one of its words of 4 letters or more
that is not a generic word (`city`, `saint`, `port`, ...) appears. Country names also match
under a few common other-language names (`Maroc`, `Deutschland`). Coordinates are two
decimal numbers with a fractional part (`31.516/-9.766`, `31.516, -9.766`), read as latitude
then longitude, and also the other way round. A date is an ISO or dotted date, an eight-digit
`YYYYMMDD` with a valid month and day, a month name with a year, or a date frame (ID3 TDRC,
TYER, TDAT, TORY, TDOR; Vorbis `date`; RIFF `ICRD`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agl.core.container import STRIPPABLE, Tag, tags
from agl.core.diskwrite import replace_atomically
from agl.core.geo import geodesic_km
from agl.dataset.manifest import Clip

RADIUS_KM = 25.0  # coordinates this close to the truth give the place away (params: download.tag_audit_km)
TABLE = "tag_audit.csv"  # beside manifest.csv in the dataset folder

# Words of a multi-word city that name no place by themselves.
_GENERIC = frozenset("""city town village saint sankt santa santo san port new old north south
east west upper lower great little district center centre central park station harbour harbor
beach island bay lake river valley mount mountain village old town state province region""".split())
# Other common names of the countries whose names the Archive's uploaders wrote in their own
# language (the English name is the manifest's).
_COUNTRY_ALIASES = {
    "morocco": ("maroc", "marruecos", "marokko"), "germany": ("deutschland", "allemagne"),
    "france": ("frankreich", "francia"), "spain": ("espana", "spanien", "espagne"),
    "italy": ("italia", "italien", "italie"), "austria": ("osterreich", "oesterreich"),
    "switzerland": ("schweiz", "suisse", "svizzera"), "netherlands": ("nederland", "holland"),
    "belgium": ("belgique", "belgie", "belgien"), "greece": ("hellas", "griechenland"),
    "japan": ("nippon", "nihon"), "mexico": ("mexique",), "brazil": ("brasil", "bresil"),
    "poland": ("polska", "polen"), "czech republic": ("cesko", "tschechien"),
    "united kingdom": ("uk", "england", "scotland", "wales"), "united states": ("usa",),
    "norway": ("norge", "norwegen"), "sweden": ("sverige", "schweden"),
    "denmark": ("danmark", "danemark"), "finland": ("suomi",), "portugal": ("portugal",),
    "turkey": ("turkiye", "turkei"), "china": ("zhongguo",), "egypt": ("misr", "egypte"),
}
_MONTHS = ("january february march april may june july august september october november "
           "december januar februar marz juni juli oktober dezember janvier fevrier mars avril "
           "mai juin juillet aout septembre octobre novembre decembre enero febrero marzo abril "
           "mayo junio julio agosto septiembre octubre noviembre diciembre gennaio febbraio "
           "aprile maggio giugno luglio settembre ottobre dicembre").split()
_DATE_FRAMES = ("TDRC", "TYER", "TDAT", "TORY", "TDOR", "TDRL", "date", "year", "ICRD", "©day",
                "Year")
_NUMBER = r"[-+]?\d{1,3}\.\d{2,}"
_COORDS = re.compile(rf"({_NUMBER})\s*[/,;| ]\s*({_NUMBER})")
_DATES = re.compile(r"\b(?:1[89]|20)\d\d[-/.](?:0?[1-9]|1[0-2])[-/.](?:0?[1-9]|[12]\d|3[01])\b|"
                    r"\b(?:0?[1-9]|[12]\d|3[01])\.(?:0?[1-9]|1[0-2])\.(?:1[89]|20)\d\d\b")
_COMPACT = re.compile(r"(?<!\d)((?:19|20)\d\d)(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])(?!\d)")
_MONTH_YEAR = re.compile(rf"\b(?:{'|'.join(_MONTHS)})\s+(?:1[89]|20)\d\d\b")


@dataclass(frozen=True)
class Finding:
    """One give-away: what it names (`city`, `country`, `continent`, `coordinates`, `date`),
    where (`file name`, or the tag's kind and key) and the words."""

    what: str
    where: str
    words: str

    def __str__(self) -> str:
        return f"{self.what} in {self.where}: {self.words!r}"


@dataclass(frozen=True)
class AuditRow:
    """One clip's audit: its tags (`kind:key` names) and what they and the file name give away."""

    key: str
    file: str
    tags: tuple[str, ...]
    findings: tuple[Finding, ...]
    unreadable: str = ""

    def places(self, source: str) -> list[Finding]:
        """Findings of a place (not a date) in the tags (`source` "tags") or the file name."""
        return [f for f in self.findings if f.what != "date"
                and (f.where == "file name") == (source == "name")]

    def dated(self, source: str) -> bool:
        return any(f.what == "date" and (f.where == "file name") == (source == "name")
                   for f in self.findings)

    def as_dict(self) -> dict[str, object]:
        def names(fs: Iterable[Finding]) -> str:
            return ";".join(sorted({f.what for f in fs}))

        return {
            "key": self.key, "file": self.file, "n_tags": len(self.tags),
            "tags": " ".join(self.tags),
            "place_in_tags": names(self.places("tags")),
            "place_in_name": names(self.places("name")),
            "date_in_tags": self.dated("tags"), "date_in_name": self.dated("name"),
            "evidence": " | ".join(str(f) for f in self.findings),
            "unreadable": self.unreadable,
        }


def fold(text: str) -> str:
    """Lower-case ASCII: accents dropped, anything else a space."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9.\-/+]+", " ", text.lower())


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", fold(text))


def name_words(stem: str) -> list[str]:
    """A file name's words: split also where case or letters and digits change."""
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])", " ", stem)
    return words(spaced.replace("_", " "))


def _contains(hay: Sequence[str], needle: Sequence[str], *, glued: bool = False) -> bool:
    """Whether `needle`'s words appear in a row in `hay`; `glued` (file names, whose words
    are often run together: `norwichmarket`): also where they begin a word of `hay` with
    their letters run together, for a name of 4 letters or more."""
    n = len(needle)
    if n and any(list(hay[i:i + n]) == list(needle) for i in range(len(hay) - n + 1)):
        return True
    joined = "".join(needle)
    if not glued or len(joined) < 4:
        return False
    rest = "".join(hay)
    starts, pos = [], 0
    for w in hay:
        starts.append(pos)
        pos += len(w)
    return any(rest.startswith(joined, i) for i in starts)


def _names(clip: Clip) -> list[tuple[str, list[list[str]]]]:
    """(what, the word sequences that name it) for the clip's city, country and continent."""
    city = words(clip.city)
    city_forms = [city] if city else []
    if len(city) > 1:
        city_forms += [[w] for w in city if len(w) >= 4 and w not in _GENERIC]
    country = words(clip.country)
    country_forms = [country] if country else []
    country_forms += [words(a) for a in _COUNTRY_ALIASES.get(" ".join(country), ())]
    continent = words(clip.continent)
    return [("city", city_forms), ("country", country_forms),
            ("continent", [continent] if continent else [])]


def find_places(clip: Clip, text_words: list[str], where: str, *, glued: bool = False) -> list[Finding]:
    out = []
    for what, forms in _names(clip):
        hit = next((f for f in forms if _contains(text_words, f, glued=glued)), None)
        if hit is not None:
            out.append(Finding(what, where, " ".join(hit)))
    return out


def find_coordinates(clip: Clip, text: str, where: str, radius_km: float) -> list[Finding]:
    for m in _COORDS.finditer(text):
        a, b = float(m.group(1)), float(m.group(2))
        for lat, lon in ((a, b), (b, a)):
            if abs(lat) <= 90 and abs(lon) <= 180:
                km = float(geodesic_km([lat], [lon], [clip.latitude], [clip.longitude])[0])
                if km <= radius_km:
                    return [Finding("coordinates", where, f"{m.group(0)} ({km:.1f} km)")]
    return []


def find_dates(text: str, where: str, *, compact: bool) -> list[Finding]:
    folded = fold(text)
    m = _DATES.search(folded) or _MONTH_YEAR.search(folded)
    if m is None and compact:
        m = _COMPACT.search(text)
    return [Finding("date", where, m.group(0))] if m else []


def audit_clip(clip: Clip, path: Path, radius_km: float = RADIUS_KM) -> AuditRow:
    """The audit of one clip at `path` (`clip.relpath` under the audio root)."""
    findings: list[Finding] = []
    try:
        found: list[Tag] = tags(path)
        unreadable = ""
    except OSError as exc:
        found, unreadable = [], f"cannot read {path.name}: {exc.strerror or exc}"
    for t in found:
        where = f"{t.kind} {t.key}"
        findings += find_places(clip, words(t.text), where)
        findings += find_coordinates(clip, t.text, where, radius_km)
        dates = find_dates(t.text, where, compact=True)
        if not dates and t.key.split(":")[0] in _DATE_FRAMES and t.text.strip():
            dates = [Finding("date", where, t.text.strip())]
        findings += dates
    stem = Path(clip.mp3name).stem
    findings += find_places(clip, name_words(stem), "file name", glued=True)
    findings += find_dates(" ".join(name_words(stem)), "file name", compact=False)
    findings += [f for f in find_dates(stem, "file name", compact=True)
                 if not any(g.where == "file name" and g.what == "date" for g in findings)]
    return AuditRow(key=clip.key, file=clip.relpath,
                    tags=tuple(dict.fromkeys(f"{t.kind}:{t.key}" for t in found)),
                    findings=tuple(findings), unreadable=unreadable)


def audit(clips: Iterable[Clip], audio_root: Path, radius_km: float = RADIUS_KM) -> list[AuditRow]:
    """Every clip whose file is under `audio_root`, in manifest order (an absent file is not
    audited: the download names it)."""
    return [audit_clip(c, audio_root / c.relpath, radius_km) for c in clips
            if (audio_root / c.relpath).is_file()]


def audit_files(root: Path) -> list[AuditRow]:
    """A folder without a manifest: every audio file's tags and the dates they or its name
    hold (no truth to compare places with), in path order."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.suffix.lower() in STRIPPABLE and p.is_file()):
        found = tags(path)
        findings = []
        for t in found:
            findings += find_dates(t.text, f"{t.kind} {t.key}", compact=True)
        findings += find_dates(path.stem, "file name", compact=True)
        rel = path.relative_to(root).as_posix()
        out.append(AuditRow(key=rel, file=rel, tags=tuple(dict.fromkeys(f"{t.kind}:{t.key}" for t in found)),
                            findings=tuple(findings)))
    return out


def summary_line(rows: Sequence[AuditRow]) -> str:
    """'N of M clips carry their place in their tags; K in their file name' (and the dates)."""
    m = len(rows)
    tagged = sum(bool(r.tags) for r in rows)
    in_tags = sum(bool(r.places("tags")) for r in rows)
    in_name = sum(bool(r.places("name")) for r in rows)
    dated = sum(r.dated("tags") for r in rows)
    return (f"{in_tags} of {m} clips carry their place in their tags; {in_name} in their file "
            f"name ({tagged} carry tags of any kind, {dated} a date in them)")


COLUMNS = ("key", "file", "n_tags", "tags", "place_in_tags", "place_in_name", "date_in_tags",
           "date_in_name", "evidence", "unreadable")


def write_table(rows: Sequence[AuditRow], path: Path) -> Path:
    """The audit as CSV (one row per clip, in manifest order), written only where it
    changed: an unchanged dataset folder keeps its files' times (DVC's hash cache)."""
    import pandas as pd


    text = pd.DataFrame([r.as_dict() for r in rows], columns=list(COLUMNS)).to_csv(
        index=False, lineterminator="\n").encode("utf-8")
    path = Path(path)
    if not (path.is_file() and not path.is_symlink() and path.read_bytes() == text):
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, text)
    return path
