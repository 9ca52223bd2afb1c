"""The embedded demo set: 32 SYNTHETIC clips, generated offline in seconds from a seed.

THIS IS NOT REAL DATA. No clip was recorded anywhere: each is a mix of simple signal models
(agl.dataset.synth) given the coordinates of a real city, so that every stage of the pipeline can run
for real on a fresh clone, offline and without keys. Scores on it mean nothing about a model.

It uses the AGL1K layout exactly: `<out>/manifest.csv` (20 columns, agl.dataset.manifest.COLUMNS),
`<out>/audio/<key>/<mp3name>` (16 kHz mono MP3), `<out>/lock.json` (size + SHA-256 per clip),
plus `<out>/demo_truth.json`, a sidecar saying what the generator put in each clip (never a
manifest column, so the manifest stays AGL1K's schema). Every title and description starts
with "SYNTHETIC"; every key is `demo_NNNN`.

What it exercises:
- acoustic filters: two clips each are meant to fail a filter, for the right reason
  (`EXPECTED_FILTER_FAILURES`): `silence` (room tone mixed at about -72 dBFS RMS),
  `clipping` (a loud mix hard-clipped, a large share of samples at full scale) and
  `flat_noise` (white noise: spectral flatness near 1, no temporal structure);
- speech detection: 12 clips contain speech-like signal (`SPEECH_CLIPS`: glottal pulses
  through formant resonators, 3-5 syllables per second, with a pitch contour), the rest none.
  Checked with silero-vad 6.2 (threshold 0.5) on the default seed: it finds speech in 79-87%
  of every clip whose foreground is speech alone or with traffic (7 clips), 15% of the one
  where speech shares the foreground with bells, 0-3% where speech is only a background
  layer, and none at all in the 20 clips without speech. The truth file records intent
  (`speech_like`, `speech_in_foreground`), not a VAD result.
- long audio: one clip lasts 130 s (`LONG_CLIP_S`, AGL1K's median), the others 8-18 s, so
  the default pipeline hears a long clip in 30-s windows (params.yaml `knn`'s long_audio);
- every continent AGL1K uses (Europe, Asia, Africa, North America, South America, Oceania);
- every category column, filled from the components: a foreground component scores 1.0 in
  its AudioSet root, a background one 0.5 (`COMPONENT_CATEGORIES`);
- container tags that give the place away, as the Archive's MP3s carry them: three clips
  (`PLANTED_TAGS`: ID3v2.3 + ID3v1 with coordinates and a date, ID3v2.4 naming the city,
  APEv2 naming the country); the tag audit (`data/tag_audit.csv`) finds those three alone,
  and the `tags` intervention sends them.

The bytes are a function of the seed, this module and the soundfile/libsndfile (LAME) build,
so the pin in `data.dvc` holds wherever the same wheels are installed.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

from agl.core import diskwrite
from agl.core.nofollow import open_part
from agl.core.paths import inside
from agl.dataset.checksums import Entry, write_lock
from agl.dataset.demo_tags import plant_tags
from agl.dataset.manifest import CATEGORY_COLUMNS, COLUMNS, write_manifest
from agl.dataset.synth import GENERATORS
from agl.errors import AglError

DEFAULT_SEED = 1444  # AGL1K's clip count; any integer works
SAMPLE_RATE = 16_000
FOREGROUND_DBFS = -20.0
BACKGROUND_DBFS = -32.0
BED_DBFS = -42.0  # the pink-noise ambience under every ordinary clip
SILENCE_DBFS = -72.0
CLIP_DRIVE_DBFS = 3.0  # a clipping clip's RMS before hard clipping at full scale


@dataclass(frozen=True)
class Place:
    """A real place: coordinates from public gazetteers, names as AGL1K spells them."""

    city: str
    country: str
    continent: str
    latitude: float
    longitude: float
    altitude: float
    mains_hz: int  # local mains frequency, heard in the hum component


@dataclass(frozen=True)
class Recipe:
    """What one demo clip contains: foreground and background components, and intent."""

    place: Place
    foreground: tuple[str, ...]
    background: tuple[str, ...] = ()
    expected_filter_failure: str | None = None  # silence | clipping | flat_noise
    seconds: float | None = None  # a fixed length (the long clip); None: drawn (ordinary clips)


def _p(city, country, continent, lat, lon, alt, hz=50) -> Place:
    return Place(city, country, continent, lat, lon, alt, hz)


# One clip longer than two minutes (issue 45: every AGL1K clip is longer than 30 s), so the
# default pipeline hears a long clip in windows (params.yaml `knn`'s long_audio); the ordinary
# clips are drawn shorter (8-18 s, were 10-25 s) so the set keeps its ~514 s of audio, which
# the curation stages' cost scales with.
LONG_CLIP_S = 130.0
ORDINARY_S = (8.0, 18.0)
FAILING_S = (10.0, 12.0)  # the clips meant to fail a filter

EU, AS, AF, NA, SA, OC = (
    "Europe", "Asia", "Africa", "North America", "South America", "Oceania"
)

RECIPES: tuple[Recipe, ...] = (
    Recipe(_p("Berlin", "Germany", EU, 52.5200, 13.4050, 34), ("birdsong",), ("traffic",)),
    Recipe(_p("Lisbon", "Portugal", EU, 38.7223, -9.1393, 45), ("speech",), ("traffic",)),
    Recipe(_p("Reykjavik", "Iceland", EU, 64.1466, -21.9426, 15), ("surf",), ("wind",)),
    Recipe(_p("Krakow", "Poland", EU, 50.0647, 19.9450, 219), ("bells",), ("speech",)),
    Recipe(_p("Naples", "Italy", EU, 40.8518, 14.2681, 17), ("speech",), ("music", "traffic")),
    Recipe(_p("Edinburgh", "United Kingdom", EU, 55.9533, -3.1883, 47), ("room_tone",), (),
           "silence"),
    Recipe(_p("Helsinki", "Finland", EU, 60.1699, 24.9384, 17), ("white_noise",), (),
           "flat_noise"),
    # kept at its old length: cut near 10 s, its bell strikes read as speech to silero (26%)
    Recipe(_p("Kyoto", "Japan", AS, 35.0116, 135.7681, 50, 60), ("bells",), ("birdsong",), seconds=13.4),
    Recipe(_p("Hanoi", "Vietnam", AS, 21.0278, 105.8342, 12), ("traffic",), ("speech",),
           "clipping"),
    Recipe(_p("Kathmandu", "Nepal", AS, 27.7172, 85.3240, 1400), ("bells", "speech")),
    Recipe(_p("Seoul", "South Korea", AS, 37.5665, 126.9780, 38, 60), ("speech",),
           ("hum_60hz",)),
    Recipe(_p("Mumbai", "India", AS, 19.0760, 72.8777, 14), ("traffic", "speech"), ("music",)),
    Recipe(_p("Ulaanbaatar", "Mongolia", AS, 47.8864, 106.9057, 1350), ("wind",), seconds=LONG_CLIP_S),
    Recipe(_p("Marrakesh", "Morocco", AF, 31.6295, -7.9811, 466), ("speech",), ("music",)),
    Recipe(_p("Nairobi", "Kenya", AF, -1.2921, 36.8219, 1795), ("birdsong",), ("crickets",)),
    Recipe(_p("Dakar", "Senegal", AF, 14.7167, -17.4677, 22), ("surf",), ("speech",)),
    Recipe(_p("Cape Town", "South Africa", AF, -33.9249, 18.4241, 25), ("white_noise",), (),
           "flat_noise"),
    Recipe(_p("Addis Ababa", "Ethiopia", AF, 9.0300, 38.7400, 2355), ("room_tone",), (),
           "silence"),
    Recipe(_p("Montreal", "Canada", NA, 45.5017, -73.5673, 36, 60), ("rain",), ("traffic",)),
    Recipe(_p("Mexico City", "Mexico", NA, 19.4326, -99.1332, 2240, 60), ("music",),
           ("speech", "traffic")),
    Recipe(_p("New Orleans", "United States", NA, 29.9511, -90.0715, 2, 60), ("music",), (),
           "clipping"),
    Recipe(_p("Havana", "Cuba", NA, 23.1136, -82.3666, 59, 60), ("music",), ("surf",)),
    Recipe(_p("Anchorage", "United States", NA, 61.2181, -149.9003, 31, 60), ("stream",),
           ("wind",)),
    Recipe(_p("Valparaiso", "Chile", SA, -33.0472, -71.6127, 10), ("surf",), ("birdsong",)),
    Recipe(_p("Cusco", "Peru", SA, -13.5320, -71.9675, 3399, 60), ("speech",), ("hum_60hz",)),
    Recipe(_p("Buenos Aires", "Argentina", SA, -34.6037, -58.3816, 25), ("traffic",),
           ("music",)),
    Recipe(_p("Manaus", "Brazil", SA, -3.1190, -60.0217, 92, 60), ("crickets", "birdsong"),
           ("rain",)),
    Recipe(_p("Bogota", "Colombia", SA, 4.7110, -74.0721, 2640, 60), ("speech",), ("rain",)),
    Recipe(_p("Wellington", "New Zealand", OC, -41.2865, 174.7762, 20), ("wind",),
           ("birdsong",)),
    Recipe(_p("Hobart", "Australia", OC, -42.8821, 147.3272, 51), ("stream",), ("birdsong",)),
    Recipe(_p("Suva", "Fiji", OC, -18.1248, 178.4501, 5), ("surf",), ("rain",)),
    Recipe(_p("Darwin", "Australia", OC, -12.4634, 130.8456, 30), ("crickets",),
           ("hum_50hz",)),
)

# Which AudioSet root (AGL1K category column) each component belongs to. Bells reach two roots
# in the ontology (Church bell: Music and Sounds of things); white noise and mains hum are
# channel artefacts; a quiet room is environment and, as near-silence, source-ambiguous.
COMPONENT_CATEGORIES: dict[str, tuple[str, ...]] = {
    "speech": ("human_sounds",),
    "birdsong": ("animal",),
    "crickets": ("animal",),
    "music": ("music",),
    "bells": ("sounds_of_things", "music"),
    "traffic": ("sounds_of_things", "environment_and_background"),
    "surf": ("natural_sounds",),
    "stream": ("natural_sounds",),
    "wind": ("natural_sounds",),
    "rain": ("natural_sounds",),
    "hum_50hz": ("channel",),
    "hum_60hz": ("channel",),
    "white_noise": ("channel",),
    "room_tone": ("environment_and_background", "source_ambiguous_sounds"),
    "ambience": ("environment_and_background",),
}


# "agl.demo" below is the generator's name as the pinned demo data records it (data.dvc); it was
# the module's path before the phase packages and stays, so that the demo set's bytes do not change.
GENERATOR = "agl.demo"
GENERATOR_LABEL = f"{GENERATOR} (SYNTHETIC)"  # the lock file's `source.generator`


def key_of(index: int) -> str:
    return f"demo_{index + 1:04d}"


# Container tags planted as AGL1K's MP3s carry them (the Archive's files keep the uploader's
# ID3 tags): which tag system, and its fields. Three clips of the counterfactual subset, so
# that the `tags` intervention measures something on the demo; every other clip has none.
# `agl download` audits them (data/tag_audit.csv), and the tests check it finds these alone.
PLANTED_TAGS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    # the Essaouira clip's shape: date, street, city, country and coordinates in COMM
    key_of(13): ("id3v2.3+id3v1", (
        ("TIT2", "SYNTHETIC demo: voices and music, Medina, Marrakesh, Maroc"),
        ("TPE1", "SYNTHETIC recordist"),
        ("COMM", "2002-02-07 16:18:00 Jemaa el-Fna, Marrakesh, Morocco 31.6295/-7.9811"))),
    # the Berlin clip's shape: the city and a month in the title, the recordist
    key_of(1): ("id3v2.4", (
        ("TIT2", "SYNTHETIC demo: speech in a street, Lisbon, Junho 2009"),
        ("TPE1", "SYNTHETIC recordist, recordist@example.org"))),
    # an APEv2 tag (foobar2000, Monkey's Audio taggers): the country alone
    key_of(25): ("apev2", (("Title", "SYNTHETIC demo: traffic"), ("Comment", "Argentina"))),
}


def demo_source(seed: int) -> dict[str, object]:
    """What the demo set's lock.json records as its source: the generator, the seed and the
    clips whose tags it planted (a folder written before the tags is generated again)."""
    # The lengths (issue 45's long clip): a folder made before them is generated again by
    # `agl download`, which would otherwise keep it (its lock still matching the seed).
    return {"generator": GENERATOR_LABEL, "seed": seed, "planted_tags": sorted(PLANTED_TAGS),
            "seconds": {"ordinary": list(ORDINARY_S), "long": LONG_CLIP_S}}


EXPECTED_FILTER_FAILURES: dict[str, str] = {
    key_of(i): r.expected_filter_failure
    for i, r in enumerate(RECIPES)
    if r.expected_filter_failure
}
SPEECH_CLIPS: frozenset[str] = frozenset(
    key_of(i) for i, r in enumerate(RECIPES) if "speech" in r.foreground + r.background
)


@dataclass(frozen=True)
class DemoClip:
    """One generated clip: its manifest row, MP3 bytes and what the generator put in it."""

    row: dict[str, object]
    mp3: bytes
    truth: dict[str, object]

    @property
    def relpath(self) -> str:
        return f"{self.row['key']}/{self.row['mp3name']}"


def _categories(recipe: Recipe) -> dict[str, float]:
    scores = dict.fromkeys(CATEGORY_COLUMNS, 0.0)
    layers = [(c, 1.0) for c in recipe.foreground] + [(c, 0.5) for c in recipe.background]
    if recipe.expected_filter_failure is None:
        layers.append(("ambience", 0.5))
    for component, score in layers:
        for column in COMPONENT_CATEGORIES[component]:
            scores[column] = max(scores[column], score)
    return scores


def _mix(recipe: Recipe, rng, n: int):
    """The clip's samples (float64, mono) before MP3 encoding."""
    import numpy as np


    def layer(name: str, dbfs: float) -> np.ndarray:
        return GENERATORS[name](rng, n, SAMPLE_RATE) * 10 ** (dbfs / 20)

    failure = recipe.expected_filter_failure
    if failure == "silence":
        return layer(recipe.foreground[0], SILENCE_DBFS)
    if failure == "flat_noise":
        return layer(recipe.foreground[0], FOREGROUND_DBFS)
    x = sum(layer(c, FOREGROUND_DBFS) for c in recipe.foreground)
    x = x + sum((layer(c, BACKGROUND_DBFS) for c in recipe.background), np.zeros(n))
    if failure == "clipping":
        # drive the mix far past full scale, as an overloaded recorder does
        x = x / np.sqrt(np.mean(x**2)) * 10 ** (CLIP_DRIVE_DBFS / 20)
        return np.clip(x, -1.0, 1.0)
    x = x + layer("ambience", BED_DBFS)
    peak = float(np.max(np.abs(x)))
    return x * (0.89 / peak) if peak > 0.89 else x  # headroom: only the clipping clips clip


def _encode(samples) -> bytes:
    import numpy as np
    import soundfile as sf

    pcm = np.round(np.clip(samples, -1.0, 1.0) * 32767).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, SAMPLE_RATE, format="MP3")
    return buf.getvalue()


def _measure(mp3: bytes) -> dict[str, float]:
    """What the decoded clip measures, so filter thresholds can be checked against intent.

    rms_dbfs: RMS level re full scale. clipped_fraction: share of samples with |x| >= 0.99.
    spectral_flatness: geometric / arithmetic mean of the Welch power spectrum (1024-sample
    Hann frames) over 50-7000 Hz; the band stops below LAME's ~7.3 kHz low-pass at 16 kHz,
    whose empty bins would otherwise drag any signal's flatness towards 0 (white noise: ~1).
    level_std_db: standard deviation of 100 ms frame levels (dB): ~0 for stationary noise.
    """
    import numpy as np
    import soundfile as sf

    x, sr = sf.read(io.BytesIO(mp3), dtype="float64")
    rms = float(np.sqrt(np.mean(x**2)))
    frames = x[: x.size // 1024 * 1024].reshape(-1, 1024) * np.hanning(1024)
    power = np.mean(np.abs(np.fft.rfft(frames, axis=1)) ** 2, axis=0)
    freqs = np.fft.rfftfreq(1024, 1 / sr)
    band = power[(freqs >= 50) & (freqs <= 7000)] + 1e-20
    flatness = float(np.exp(np.mean(np.log(band))) / np.mean(band))
    hop = sr // 10
    levels = x[: x.size // hop * hop].reshape(-1, hop)
    levels_db = 10 * np.log10(np.mean(levels**2, axis=1) + 1e-20)
    return {
        "rms_dbfs": round(float(20 * np.log10(max(rms, 1e-12))), 2),
        "clipped_fraction": round(float(np.mean(np.abs(x) >= 0.99)), 4),
        "spectral_flatness": round(flatness, 4),
        "level_std_db": round(float(np.std(levels_db)), 2),
        "decoded_seconds": round(x.size / sr, 4),
    }


def generate(seed: int = DEFAULT_SEED, workers: int | None = None) -> list[DemoClip]:
    """All demo clips, in manifest order. Same seed, same bytes, whatever `workers` is."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    # The generators (agl.dataset.synth) import scipy lazily. Imported first by several threads
    # at once, scipy's circular imports hand one of them a partly initialised module: `agl
    # download` failed under load with "cannot import name 'PytestTester' from partially
    # initialized module". So they are imported here, once, before any thread starts.
    import scipy.fft  # noqa: F401
    import scipy.signal  # noqa: F401

    # one child seed per clip, drawn up front, so a clip's content depends only on its seed
    # and its recipe, and clips can be made in parallel (numpy and libsndfile free the GIL)
    seeds = np.random.default_rng(seed).integers(2**63, size=len(RECIPES))
    with ThreadPoolExecutor(max_workers=workers or min(4, os.cpu_count() or 1)) as pool:
        jobs = [
            pool.submit(_make_clip, i, recipe, int(child), seed)
            for i, (recipe, child) in enumerate(zip(RECIPES, seeds, strict=True))
        ]
        return [job.result() for job in jobs]


def _make_clip(i: int, recipe: Recipe, child_seed: int, seed: int) -> DemoClip:
    import numpy as np

    rng = np.random.default_rng(child_seed)
    lo, hi = FAILING_S if recipe.expected_filter_failure else ORDINARY_S
    drawn = round(float(rng.uniform(lo, hi)), 1)  # drawn for every clip: the mix's stream stays put
    n = int((recipe.seconds or drawn) * SAMPLE_RATE)
    mp3 = _encode(_mix(recipe, rng, n))
    measured = _measure(mp3)
    key = key_of(i)
    if key in PLANTED_TAGS:  # after measuring: the tags change no sample
        mp3 = plant_tags(mp3, *PLANTED_TAGS[key])
    parts = recipe.foreground + recipe.background
    place = recipe.place
    what = " + ".join(recipe.foreground) + (
        f" (background: {', '.join(recipe.background)})" if recipe.background else ""
    )
    row = {
        "key": key,
        "short_key": key.split("_")[1],
        "longitude": place.longitude,
        "latitude": place.latitude,
        "altitude": place.altitude,
        "description": (
            f"SYNTHETIC demo clip generated by {GENERATOR} (seed {seed}); not a field recording. "
            f"Components: {what}. Labelled with a real place only to exercise the pipeline."
        ),
        "title": f"SYNTHETIC demo clip {i + 1}: {what}",
        "mp3name": f"{key}_{'_'.join(parts)}.mp3",
        "mp3seconds": measured["decoded_seconds"],
        "city": place.city,
        "country": place.country,
        "continent": place.continent,
        **_categories(recipe),
    }
    truth = {
        "synthetic": True,
        "foreground": list(recipe.foreground),
        "background": list(recipe.background),
        "speech_like": key in SPEECH_CLIPS,
        "speech_in_foreground": "speech" in recipe.foreground,
        "expected_filter_failure": recipe.expected_filter_failure,
        "measured": measured,
        **({"planted_tags": PLANTED_TAGS[key][0]} if key in PLANTED_TAGS else {}),
    }
    return DemoClip(row=row, mp3=mp3, truth=truth)


def _write_if_changed(path: Path, data: bytes) -> None:
    """Atomic write that leaves an identical file untouched (DVC's mtime cache stays valid)."""
    if path.exists() and path.read_bytes() == data:
        return
    diskwrite.write_bytes(path, data)  # never through a link planted at its name


def write_demo(out: str | Path, seed: int = DEFAULT_SEED) -> list[DemoClip]:
    """Generate the demo set into `out` (manifest.csv, audio/, lock.json, demo_truth.json).

    Refuses a folder that already holds audio the demo set did not make, so it can never mix
    synthetic clips into a real dataset.
    """
    import pandas as pd

    out = Path(out)
    audio = out / "audio"
    ours = {key_of(i) for i in range(len(RECIPES))}
    if audio.is_dir():
        foreign = sorted(p.name for p in audio.iterdir() if p.name not in ours)
        if foreign:
            raise AglError(
                f"{audio}: holds clips that are not part of the demo set ({foreign[0]}, ...); "
                "generate the demo into an empty folder or remove that audio first"
            )
    for key in sorted(ours):  # a planted link must not make us write (or unlink) outside `audio`
        inside(audio, audio / key)
    clips = generate(seed)
    for clip in clips:
        _write_if_changed(audio / clip.relpath, clip.mp3)
        # a previous seed's file under another name would otherwise linger in the folder
        for stale in (audio / str(clip.row["key"])).iterdir():
            if stale.name != clip.row["mp3name"]:
                stale.unlink()
    frame = pd.DataFrame([c.row for c in clips], columns=list(COLUMNS))
    staged = out / ".manifest.csv.part"
    with open_part(staged) as fh:  # never through a link planted there
        write_manifest(frame, fh)
    _write_if_changed(out / "manifest.csv", staged.read_bytes())
    staged.unlink()
    write_lock(
        out / "lock.json",
        {c.relpath: Entry(size=len(c.mp3), sha256=_sha256(c.mp3)) for c in clips},
        source=demo_source(seed),
    )
    truth = {
        "synthetic": True,
        "note": f"SYNTHETIC demo set generated by {GENERATOR}; not recordings of the places named.",
        "generator": GENERATOR,
        "seed": seed,
        "sample_rate": SAMPLE_RATE,
        "clips": {c.row["key"]: c.truth for c in clips},
    }
    _write_if_changed(
        out / "demo_truth.json", (json.dumps(truth, indent=1, sort_keys=True) + "\n").encode()
    )
    return clips


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
