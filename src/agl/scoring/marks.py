"""The leaderboard's row marks that tell a reader a run is not what it seems: "‡", a run beside
the paper's values not run under the paper's protocol, and "§", a run the provider says was
answered by another model than the one asked, or by more than one (the served-model ledger's
`served_flags` in the run's tracked run_summary.json; agl.predictions.served), "∅", a run that
heard nothing (the blind baseline, agl.backends.blind), and "≡", a run whose model read a text
report of what this project's listeners heard instead of the audio (agl.backends.cascade).
(agl.scoring.leaderboard renders them; kept apart to keep that module small.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from agl.contracts.long_audio import protocol_label
from agl.errors import AglError

# The paper's table: the columns a published value sits beside.
PAPER_COLUMNS = ("distance_error_km", "continent_acc", "country_acc", "city_acc")

PROTOCOL_MARK = "‡"
PROTOCOL_NOTE = ("A run marked \"‡\" sits beside the paper's values but was not run under the "
                 "paper's protocol (the authors' decoding settings, gateway and prompts: "
                 "`agl models --yaml NAME --protocol paper`): {runs}. Its numbers and the "
                 "paper's come from two different experiments.")


def off_protocol(row: pd.Series) -> bool:
    """Whether a row beside a paper value ran under a protocol other than the paper's (a
    published run of the authors is the paper's own)."""
    in_paper = any(pd.notna(row.get(f"paper_{c}")) for c in PAPER_COLUMNS)
    return (in_paper and str(row.get("source", "")) != "published"
            and str(row.get("run_protocol", "") or "") != "paper")


SERVED_MARK = "§"
SERVED_NOTE = ("A run marked \"§\" was answered, by the provider's own account (OpenAI "
               "response.model, Gemini model_version; the served-model ledger, "
               "docs/backends.md#retired-models-and-the-served-model-ledger), by another model "
               "than the one it asked for, or by more than one model: {runs}. Its numbers are "
               "those of the model(s) that answered.")


def served_note(flagged: dict[str, str]) -> str:
    """The note under a table for the runs marked "§": run -> its flags as one text."""
    return SERVED_NOTE.format(runs=" | ".join(f"{run}: {flags}" for run, flags in flagged.items()))


def served_flags(row: pd.Series) -> str:
    """A row's served-model flags as one text ("" for a run without any)."""
    v = row.get("served_flags")
    return v if isinstance(v, str) else ""


def run_flags(metrics_path: Path) -> list[str]:
    """The served-model flags (agl.predictions.served) in the tracked run_summary.json beside a
    run's metrics.json: a served id not the asked one, a change of served model mid-run, or
    a server that reported hearing less audio than it was sent ([] for a run without a
    summary or flags). Raises AglError for a summary it cannot read."""
    path = Path(metrics_path).with_name("run_summary.json")
    if not path.exists():
        return []
    redo = f"rebuild it with the run's infer stage (dvc repro -f infer@{path.parent.name})"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AglError(f"{path}: not readable JSON ({type(exc).__name__}); {redo}") from None
    flags = doc.get("served_flags") if isinstance(doc, dict) else None
    # A server that heard less audio than it was sent (agl.inference.summary.heard_figures:
    # "the server heard 30 s of 130") is flagged beside the served-model flags.
    heard = doc.get("heard_flag") if isinstance(doc, dict) else None
    if heard is not None and not isinstance(heard, str):
        raise AglError(f"{path}: heard_flag is not a line; {redo}")
    if flags is None:
        return [heard] if heard else []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise AglError(f"{path}: served_flags is not a list of lines; {redo}")
    return [*flags, *([heard] if heard else [])]


def served_lines(metrics_files: list[Path]) -> dict[str, list[str]]:
    """Each flagged run's served-model flags (`run_flags`), by its folder's name."""
    out = {}
    for path in metrics_files:
        flags = run_flags(Path(path))
        if flags:
            out[Path(path).parent.name] = flags
    return out


# Backends whose model never receives the audio: their rows are baselines, not listeners.
DEAF_MARKS = {"blind": "∅", "cascade": "≡"}
DEAF_NOTES = {
    "blind": ("A run marked \"∅\" heard nothing: the blind baseline sends the prompt without the "
              "audio (settings.inputs: none) or with the clip's title alone (inputs: title), so "
              "its numbers are the model's prior or what the title tells, not listening "
              "(docs/baselines.md): {runs}."),
    "cascade": ("A run marked \"≡\" did not hear the audio either: its text model read a report "
                "of what this project's listeners heard (Whisper's language and transcript, "
                "BirdNET's species, the tagger's categories, the duration; docs/baselines.md): "
                "{runs}."),
}


def deaf_mark(row: pd.Series) -> str:
    """"∅" / "≡" for a row whose model received no audio, else ""."""
    return DEAF_MARKS.get(str(row.get("backend", "") or ""), "")


def deaf_notes(rows: pd.DataFrame) -> list[str]:
    """One note per kind of run without audio that the table holds."""
    if "backend" not in rows:
        return []
    out = []
    for backend, note in DEAF_NOTES.items():
        runs = [str(r) for r in rows.loc[rows["backend"].astype(str) == backend, "run"]]
        if runs:
            out.append(note.format(runs=", ".join(runs)))
    return out


def run_hearing(metrics_path: Path) -> str | None:
    """What a run heard of each clip, in words, where its tracked run_summary.json names a
    long-audio protocol (`long_audio`: windows, truncate, multi_part); None for a run that
    sent the whole file (or has no summary)."""
    path = Path(metrics_path).with_name("run_summary.json")
    try:
        doc = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # run_flags names an unreadable summary in one line
    protocol = doc.get("long_audio") if isinstance(doc, dict) else None
    return protocol_label(protocol) if isinstance(protocol, dict) else None
