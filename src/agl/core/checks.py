"""The statistical knobs, checked before anything uses them: one line naming the key.

A count of bootstrap resamples of -5 used to run: every interval came out null and the
leaderboard dropped its CIs without a word; a seed of -1 raised deep inside numpy. Every
number that the meaning of a result rests on (resample and permutation counts, seeds, minimum
supports, shares and distances) is checked here, wherever it comes from:

* params.yaml: `PARAMS` maps each such key, and every other number and switch of params.yaml
  (timeouts, retries, thresholds, `enabled`; a `*` stands for any name, e.g. `perturb.*.seed`),
  to its rule: the one table for that setting (text: choices, paths, URLs, is its reader's).
  `check_params` checks a loaded section against it, and the configs that read the key take
  its rule from here too (the knobs of agl.scoring.config, `check_params` / `param_value` in
  the other readers), so the params check and the config accept the same values and refuse
  the others with the same line (tests/test_params_one_rule.py walks every key of
  params.yaml). The stages check every section they load (stages/_params.py), and the
  commands that read params.yaml themselves (`agl report`, `agl download`) check theirs.
* the command line: `arg_type(rule)` is an argparse type (`--bootstrap`, `--seed`), so a bad
  value is argparse's one-line usage error, exit 2.

A whole number may be written as an integer or as an integral float (`1000.0`; `param_value`
gives it back as an int); a boolean (an int in Python: `download.jobs: true` was one download),
text (`"1e3"` is text in YAML) or a fraction is refused. Every refusal is one line in one format
(`refusal`): ``<where> <key>: <value> is not <what>; e.g. `<key>: <valid>` ``.

Checksums too: an expected SHA-256 (`--sha256`, `download.manifest_sha256`,
`paper.published.<name>.sha256`) must be 64 hex digits (`sha256_value`, `sha256_arg`), so a
typo (`abc`) is named as a malformed hash, not reported later as a file that "does not match".
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agl.core.param_table import PARAMS
from agl.errors import AglError, reject_unknown_keys


def _whole(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    return isinstance(v, int) or (isinstance(v, float) and v.is_integer())


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)


@dataclass(frozen=True)
class Rule:
    what: str  # what a valid value is, in words
    test: Callable[[Any], bool]


# infer.repeats' bound: the authors ran one seed; 100 draws pin a flip rate to a few points
MAX_REPEATS = 100

RULES: dict[str, Rule] = {
    "count": Rule("a whole number of at least 1", lambda v: _whole(v) and v >= 1),
    "count0": Rule("a whole number, 0 or more", lambda v: _whole(v) and v >= 0),
    "count_or_null": Rule("null or a whole number of at least 1",
                          lambda v: v is None or (_whole(v) and v >= 1)),
    "seed": Rule("a seed: a whole number, 0 or more", lambda v: _whole(v) and v >= 0),
    "positive": Rule("a positive finite number", lambda v: _number(v) and v > 0),
    "share": Rule("a share in (0, 1]", lambda v: _number(v) and 0 < v <= 1),
    "share_open": Rule("a share strictly between 0 and 1", lambda v: _number(v) and 0 < v < 1),
    "share_closed": Rule("a share in [0, 1]", lambda v: _number(v) and 0 <= v <= 1),
    "nonnegative": Rule("a finite number, 0 or more", lambda v: _number(v) and v >= 0),
    "number": Rule("a finite number", _number),
    # `agl power`'s questions: a test level and a power whose normal quantiles are finite
    # numbers (alpha 1e-300 made 1 - alpha/2 round to 1: an infinite quantile), and a
    # difference whose sample size is a number (--km 1e-300 asked for 1e600 clips).
    "test_level": Rule("a test level between 1e-6 and 0.5", lambda v: _number(v) and 1e-6 <= v <= 0.5),
    "power": Rule("a power between 0.5 and 0.9999", lambda v: _number(v) and 0.5 <= v <= 0.9999),
    "km_difference": Rule("a distance difference between 1 km and 20,015 km (half the Earth's "
                          "circumference)", lambda v: _number(v) and 1 <= abs(v) <= 20015),
    "points": Rule("an accuracy difference between 0.1 and 100 percentage points",
                   lambda v: _number(v) and 0.1 <= abs(v) <= 100),
    "integer": Rule("a whole number", _whole),
    "bool": Rule("true or false (unquoted)", lambda v: isinstance(v, bool)),
    "positive_or_null": Rule("null or a positive finite number",
                             lambda v: v is None or (_number(v) and v > 0)),
    # a share of a length that may be missing: 1 would accept an empty file
    "tolerance": Rule("a share in [0, 1)", lambda v: _number(v) and 0 <= v < 1),
    "tolerance_or_null": Rule("null or a share in [0, 1)", lambda v: v is None or (_number(v) and 0 <= v < 1)),
    # a level relative to full scale or to the loudest: above 0 dB would refuse or drop everything
    "decibels_below": Rule("a finite level in dB, 0 or less", lambda v: _number(v) and v <= 0),
    "hz_band": Rule("a band [low, high] in Hz with 0 <= low < high",
                    lambda v: isinstance(v, list | tuple) and len(v) == 2 and all(_number(x) for x in v)
                    and 0 <= v[0] < v[1]),
    # BirdNET scores 3 s windows: a last window longer than that does not exist
    "birdnet_window": Rule("seconds in (0, 3] (BirdNET's window is 3 s)",
                           lambda v: _number(v) and 0 < v <= 3),
    # Whisper reads 30 s at a time
    "whisper_window": Rule("seconds in (0, 30] (Whisper reads 30 s)", lambda v: _number(v) and 0 < v <= 30),
    "repeats": Rule(f"a whole number from 1 to {MAX_REPEATS} (1: each clip asked once)",
                    lambda v: _whole(v) and 1 <= v <= MAX_REPEATS),
    # a graded intervention: one value, or a series of them, one level each
    "positive_series": Rule("a positive finite number or a non-empty list of them",
                            lambda v: (_number(v) and v > 0) or (isinstance(v, list) and bool(v) and all(
                                _number(x) and x > 0 for x in v))),
}

# The default of params.yaml `evaluate.max_resamples`: the most resamples or permutations any
# count may ask for (docs/metrics.md#resource-bounds). 1e9 bootstrap resamples ran past two
# minutes and a gigabyte; 100,000 is 10x the largest count params.yaml sets (10,000 sign
# flips: p-values to 1e-4), and `agl evaluate --bootstrap 100000` on 1,000 clips takes ~37 s
# and 360 MB (2 cores; 3 s and 220 MB at the default 1,000).
MAX_RESAMPLES = 100_000
RESAMPLE_BOUND = "evaluate.max_resamples"


def resample_bound(value: Any, source: str = "params.yaml") -> int:
    """`evaluate.max_resamples` as given (None: the default), checked: a whole number >= 1."""
    if value is None:
        return MAX_RESAMPLES
    check_param(RESAMPLE_BOUND, value, source)  # its rule in PARAMS
    return int(value)


def check_resamples(counts: dict[str, tuple[Any, int]], bound: Any, source: str = "params.yaml") -> None:
    """No resample or permutation count (`key path -> (value, lowest allowed)`) may pass
    `evaluate.max_resamples`; the first that does is one line naming `source`, the key path,
    the value and the allowed range (a count that is no whole number, NaN, a boolean or under
    its lowest is refused by its field's rule). Checked before any work: a count of 1e9 used
    to run for minutes and take gigabytes before anything failed."""
    top = resample_bound(bound, source)
    for key, (value, low) in counts.items():
        # not a whole number, or under `low`: the field's rule names it (RULES, check_fields)
        if _whole(value) and value > top:
            raise AglError(
                f"{source} {key}: {value!r} is not a whole number in the allowed range {low} to "
                f"{top} ({RESAMPLE_BOUND}, the bound on every resample and permutation count: "
                f"time and memory grow with it); lower it, or raise {RESAMPLE_BOUND}")


def flag_bound(params: str | Path = "params.yaml") -> int:
    """`evaluate.max_resamples` for a command-line count (`--bootstrap`): from `params` when
    that file exists (a checkout), else the default."""
    import yaml

    path = Path(params)
    if not path.is_file():
        return MAX_RESAMPLES
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise AglError(f"{path}: cannot read params ({exc})") from None
    section = doc.get("evaluate") if isinstance(doc, dict) else None
    return resample_bound(section.get("max_resamples") if isinstance(section, dict) else None, str(path))


def check_count_flag(flag: str, value: int | None, low: int, params: str | Path = "params.yaml") -> None:
    """A command-line count (`--bootstrap N`) against the same bound, before any work."""
    if value is None:
        return
    top = flag_bound(params)
    if not low <= value <= top:
        where = f"{params}'s" if Path(params).is_file() else "the default"
        raise AglError(f"{flag} {value}: outside the allowed range {low} to {top} ({where} "
                       f"{RESAMPLE_BOUND}, the bound on every resample and permutation count: "
                       f"time and memory grow with it); lower it, or raise {RESAMPLE_BOUND} in params.yaml")


def refusal(where: str, key: str, value: Any, rule: str, example: str | None = None) -> str | None:
    """The one line for a value that breaks `rule`, or None where it keeps it: `where` (the
    file or the command), the key, the value, what a valid value is and, where known, one.
    The params table (`param_refusal`) and every other check (`check_value`) write it."""
    r = RULES[rule]
    if r.test(value):
        return None
    shown = "null" if value is None else repr(value)
    fix = f"; e.g. `{key}: {example}`" if example is not None else ""
    return f"{where} {key}: {shown} is not {r.what}{fix}"


def check_value(key: str, value: Any, where: str, *, rule: str, example: str | None = None) -> None:
    """Refuse `value` unless it satisfies `rule`; the message (`refusal`) names `where` and `key`."""
    line = refusal(where, key, value, rule, example)
    if line is not None:
        raise AglError(line)


def number_setting(settings: Any, key: str, default: int | float, rule: str, where: str) -> Any:
    """A model entry's numeric setting (its `settings:` under `models:`; `default` when
    absent), checked by `rule`: `k: four` is one line naming `where` and the key, where
    `int('four')` was a ValueError traceback and `int(1.5)` a silent 1."""
    value = settings.get(key, default)
    check_value(key, value, where, rule=rule, example=_yaml(default))
    return value


def check_names(value: Any, key: str, what: str, example: str) -> None:
    """`value` must be a list of names (text): YAML text there would be read letter by letter,
    and null or a number fails later with a TypeError. `key`: the full key with its source."""
    if not isinstance(value, list | tuple) or not all(isinstance(x, str) for x in value):
        raise AglError(f"{key}: {value!r} is not a list of {what}; e.g. {example}")


# A config field's annotation -> (the test its value must pass, what a valid value is in words).
_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (_whole, "a whole number"),
    "float": (RULES["number"].test, RULES["number"].what),
    "bool": (lambda v: isinstance(v, bool), "true or false (unquoted)"),
    "str": (lambda v: isinstance(v, str), "text"),
}


def check_field_types(cfg: Any, source: str) -> None:
    """Every field of the config dataclass `cfg` annotated int, float, bool or str (or one of
    those or None) holds such a value, else one line naming `source`.<field> and its default:
    `speech.max_windows: four` used to end in a ValueError traceback from `int('four')`, and
    `4.5` was cut to 4 without a word. Other annotations (dicts, tuples) are the caller's."""
    for f in dataclasses.fields(cfg):
        text = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        names = [t.strip() for t in text.split("|")]
        optional = "None" in names
        kinds = [t for t in names if t != "None"]
        if len(kinds) != 1 or kinds[0] not in _TYPES:
            continue
        value = getattr(cfg, f.name)
        test, what = _TYPES[kinds[0]]
        if (value is None and optional) or test(value):
            continue
        example = "" if f.default is dataclasses.MISSING else f"; e.g. `{f.name}: {_yaml(f.default)}`"  # as `refusal`
        shown = _yaml(value) if value is None else repr(value)
        raise AglError(f"{source}.{f.name}: {shown} is not {what}{' or null' if optional else ''}{example}")


def _yaml(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _flatten(prefix: str, node: Any) -> list[tuple[str, Any]]:
    # a ruled key's value is tested whole: `filter.jobs: {a: 1}` is no section to walk into
    if isinstance(node, dict) and param_rule(prefix) is None:
        out = []
        for k, v in node.items():
            out.extend(_flatten(f"{prefix}.{k}", v))
        return out
    return [(prefix, node)]


def param_rule(key: str) -> tuple[str, str] | None:
    """(rule, a valid example) of the params key `key` in `PARAMS`, or None (no rule)."""
    for pattern, spec in PARAMS.items():
        if key.count(".") == pattern.count(".") and fnmatch.fnmatchcase(key, pattern):
            return spec
    return None


def param_refusal(key: str, value: Any, source: str = "params.yaml") -> str | None:
    """The one line for a value of the params key `key` that breaks its rule (the file, the
    key, the rule and a valid value), or None where it keeps it or the key has no rule."""
    spec = param_rule(key)
    return None if spec is None else refusal(source, key, value, spec[0], spec[1])


def param_value(key: str, value: Any, source: str = "params.yaml") -> Any:
    """`value` of the params key `key` checked by its rule (`check_param`), a whole number
    given as `4.0` returned as 4 where the rule asks for one (a count, a seed)."""
    check_param(key, value, source)
    spec = param_rule(key)
    if spec is not None and spec[0] in _WHOLE_RULES and _whole(value):
        return int(value)
    return value


_WHOLE_RULES = frozenset({"count", "count0", "count_or_null", "seed", "integer", "repeats"})


def check_param(key: str, value: Any, source: str = "params.yaml") -> None:
    """`param_refusal` raised as an AglError."""
    line = param_refusal(key, value, source)
    if line is not None:
        raise AglError(line)


def check_params(prefix: str, node: Any, source: str = "params.yaml") -> None:
    """Check the section (or value) of params.yaml found at `prefix` (`"evaluate"`,
    `"counterfactual.level_bootstrap"`, `"models.knn"`) against `PARAMS`; the first value
    that breaks its rule is one line (`param_refusal`)."""
    for key, value in _flatten(prefix, node):
        check_param(key, value, source)


def arg_type(rule: str) -> Callable[[str], int | float]:
    """An argparse type for a command-line knob: the value parsed, then checked by `rule`."""
    r = RULES[rule]

    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{text!r} is not {r.what}") from None
        if not r.test(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {r.what}")
        return int(value) if _whole(value) and "." not in text else value

    parse.__name__ = rule  # argparse names the type in some messages
    return parse


_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA256_WHAT = "a SHA-256 (64 hex digits, as `sha256sum FILE` prints)"


def sha256_value(value: Any, where: str) -> str:
    """`value` as a lower-case SHA-256, or one line naming `where` (e.g. `--sha256`)."""
    text = str(value).strip().lower() if isinstance(value, str) else ""
    if not _SHA256.fullmatch(text):
        raise AglError(f"{where}: {value!r} is not {_SHA256_WHAT}; give the full hash")
    return text


def sha256_arg(text: str) -> str:
    """An argparse type for `--sha256`: a malformed hash is a usage error, not a mismatch."""
    try:
        return sha256_value(text, "SHA-256")
    except AglError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {_SHA256_WHAT}") from None


# The top-level sections of params.yaml. A stage's are also read from the `params:` of
# dvc.yaml beside the file (a new stage's section is known once declared there); these are
# the ones a command alone reads, and the shipped stages'. `evalute:` used to be ignored
# without a word while every stage ran on the defaults of `evaluate:`.
SECTIONS = frozenset({
    "data", "download", "filter", "tag", "birds", "speech", "duplicates", "localizability", "infer",
    "executor", "models", "evaluate", "mlflow", "leaderboard", "export", "paper", "report",
    "perturb", "counterfactual"})


def declared_sections(dvc_yaml: Path) -> set[str]:
    """The params sections the stages of `dvc_yaml` declare (none when it is absent or
    unreadable: DVC itself names a broken dvc.yaml)."""
    import yaml

    try:
        # libyaml's parser where installed (a stage's every params read consults this file:
        # 0.015 s -> 0.002 s of CPU); the same safe constructors
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        doc = yaml.load(dvc_yaml.read_text(encoding="utf-8"), Loader=loader) if dvc_yaml.is_file() else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return set()
    out: set[str] = set()
    for stage in ((doc or {}).get("stages") or {}).values() if isinstance(doc, dict) else ():
        body = stage.get("do", stage) if isinstance(stage, dict) else {}
        for entry in (body.get("params") or []) if isinstance(body, dict) else []:
            keys = [entry] if isinstance(entry, str) else list(entry.values())[0] if isinstance(entry, dict) else []
            for key in keys if isinstance(keys, list) else []:
                if isinstance(key, str) and "${" not in key.split(".")[0]:
                    out.add(key.split(".")[0])
    return out


def check_sections(doc: Any, path: Path) -> None:
    """Every top-level key of the params file `path` is a section agl reads, else one line
    naming it, the closest section and the known ones."""
    if not isinstance(doc, dict):
        return

    known = SECTIONS | declared_sections(Path(path).parent / "dvc.yaml")
    reject_unknown_keys({k: None for k in doc}, set(known), f"{path}: top-level section")
