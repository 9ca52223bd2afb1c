"""The documentation cannot drift from the code: README.md and every docs/*.md page are checked.

For every page (new pages are found by the glob, no list to update):

* every fenced code block has a language; `bash`/`sh`/`shell`/`console` blocks are shell, and
  every command in them, and every inline code span that starts like a command (`agl ...`,
  `dvc ...`, `mlflow ...`, `python stages/...`, `scripts/...`), is checked:
  - `agl`, `dvc`, `mlflow`: each subcommand level must exist (its `--help` exits 0) and every
    flag used (`--flag`, `--flag=value`, `-f`) must appear in that subcommand's `--help`;
  - `python stages/X.py`, `python benchmarks/X.py`, `scripts/X`: the file must exist; one that
    uses argparse is checked against its `--help`, one that does not (a thin DVC stage script
    with positional arguments) against the `usage:` line of its own docstring or source: its
    flags, how many positional arguments it takes and literal choices such as `start|stop`.
    Scripts without argparse are never run (`stages/leaderboard.py --help` would write a
    folder called `--help`);
  - any other program must be named in UNCHECKED_PROGRAMS (third-party tools whose flags this
    project does not own, and shell built-ins);
* `dvc exp run -S key=value`: the params key exists in params.yaml;
* every relative link resolves to a file, and a `#fragment` to a heading of the target page;
* every inline code span that names a params.yaml key path (`evaluate.metric_bootstrap`,
  `params.yaml: paper.base_url`, `paper.published.<name>.path`) names one that exists;
* every inline code span that names a repository path (`src/...`, `stages/...`, `tests/...`,
  `benchmarks/...`, `scripts/...`) names one that exists, and every dotted module reference
  (`agl.dataset.manifest.load_manifest`) a module under src/ that defines that name (module
  paths cannot go stale);
* every `yaml` block parses; one made only of params.yaml sections is a params excerpt, and
  the keys of its fixed-schema sections must exist in params.yaml.

Every `--help` is run once per worker, when a page that names it is checked: `agl`'s in
this process (its own parser), the others in parallel processes (mlflow's all in one: its
CLI import takes seconds).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# Programs whose flags are not checked, and why: third-party tools this project does not own
# (vllm is not installed here; pip/git/apt-get are the user's own tools) and shell built-ins.
# sbatch / kubectl: a cluster's own tools (docs/cluster.md); the scripts they run are checked
# by tests/test_ray_transport.py.
UNCHECKED_PROGRAMS = {"pip", "git", "apt-get", "vllm", "cd", "rm", "export", "sbatch", "kubectl"}
# `python -m <module>` invocations that are not checked (pytest's flags are pytest's).
UNCHECKED_MODULES = {"pytest"}
# Names in backticks that look like params keys but are MLflow's own (its dataset API and a
# system tag), not params.yaml sections.
NOT_PARAM_KEYS = {"mlflow.data", "mlflow.parentRunId"}
# Params keys that other open issues are adding, allowed before they land (none today).
PENDING_PARAM_KEYS: set[str] = set()
# params.yaml sections whose second-level keys are names the user chooses (a model, an
# intervention), so a yaml excerpt may add any key there.
FREE_FORM_SECTIONS = {"models", "perturb"}
SHELL_LANGS = {"bash", "sh", "shell", "console"}
# The last segment of `data.dvc`, `filter.csv`, `report.html`: a file name, not a params key.
FILE_EXTENSIONS = {"csv", "md", "html", "json", "jsonl", "yaml", "yml", "py", "txt", "png",
                   "svg", "npz", "dvc", "db", "lock", "mp3", "flac", "wav", "bin"}
REPO_PATH_PREFIXES = ("src/", "stages/", "tests/", "benchmarks/", "scripts/", ".ci/")


def doc_pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


# ---------------------------------------------------------------- markdown


@dataclass
class Fence:
    lang: str
    body: str
    line: int


def split_markdown(text: str) -> tuple[list[Fence], list[tuple[int, str]]]:
    """Fenced blocks, and the prose as paragraphs (first line number, lines joined by spaces:
    a code span may wrap onto the next line)."""
    fences: list[Fence] = []
    paragraphs: list[tuple[int, str]] = []
    lines = text.splitlines()
    i, para, start = 0, [], 0
    while i < len(lines):
        m = re.match(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if m:
            if para:
                paragraphs.append((start, " ".join(para)))
                para = []
            marker, body, j = m.group(1), [], i + 1
            while j < len(lines) and not lines[j].strip().startswith(marker):
                body.append(lines[j])
                j += 1
            fences.append(Fence(m.group(2).lower(), "\n".join(body), i + 1))
            i = j + 1
            continue
        if lines[i].strip():
            if not para:
                start = i + 1
            para.append(lines[i].strip())
        elif para:
            paragraphs.append((start, " ".join(para)))
            para = []
        i += 1
    if para:
        paragraphs.append((start, " ".join(para)))
    return fences, paragraphs


def code_spans(paragraph: str) -> list[str]:
    return [m.group(2).strip() for m in re.finditer(r"(`+)(.+?)\1", paragraph)]


def links(paragraph: str) -> list[str]:
    prose = re.sub(r"(`+).+?\1", "", paragraph)  # a link inside code is not a link
    return [m.group(1) for m in re.finditer(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", prose)]


def github_slugs(text: str) -> set[str]:
    """Heading anchors as GitHub renders them (duplicates get -1, -2, ...)."""
    fences_removed = re.sub(r"^\s*(`{3,}|~{3,}).*?^\s*\1", "", text, flags=re.S | re.M)
    slugs: set[str] = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", fences_removed, flags=re.M):
        title = re.sub(r"`", "", m.group(1))
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
        slug = "".join(c for c in title.lower()
                       if c in " -_" or unicodedata.category(c)[0] in "LN")
        slug = slug.replace(" ", "-")
        candidate, n = slug, 0
        while candidate in slugs:
            n += 1
            candidate = f"{slug}-{n}"
        slugs.add(candidate)
    return slugs


# ---------------------------------------------------------------- shell


def strip_comment(line: str) -> str:
    """Drop a `# comment` (a # at the start of a word, outside quotes)."""
    quote = None
    for k, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k]
    return line


def shell_commands(body: str, lang: str) -> list[str]:
    """One string per command line of a shell block: continuations joined, comments and
    `$ ` prompts (console) dropped, output lines of a console block skipped."""
    out: list[str] = []
    pending = ""
    for raw in body.splitlines():
        line = raw.rstrip()
        if lang == "console" and not pending:
            if not line.lstrip().startswith("$ "):
                continue
            line = line.lstrip()[2:]
        line = strip_comment(line).rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            out.append(line)
    return out


def simple_commands(line: str) -> list[list[str]]:
    """Split a command line at && || ; | into argument lists; [optional] brackets and
    leading VAR=value assignments removed."""
    tokens = shlex.split(line)
    commands, current = [], []
    for tok in tokens:
        if tok in {"&&", "||", ";", "|", "&"}:
            commands.append(current)
            current = []
        else:
            current.append(tok)
    commands.append(current)
    result = []
    for cmd in commands:
        cmd = [t.strip("[]") for t in cmd]
        cmd = [t for t in cmd if t not in {"", "...", "…"}]
        while cmd and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[0]):
            cmd = cmd[1:]
        if cmd:
            result.append(cmd)
    return result


def is_flag(tok: str) -> bool:
    return tok.startswith("-") and tok not in {"-", "--"} and not re.match(r"^-[\d.]", tok)


_HELP: dict[tuple[str, ...], tuple[int, str]] = {}


def _agl_help(words: tuple[str, ...]) -> tuple[int, str]:
    """`agl WORDS --help` in this process: the same parser (`agl.cli.build_parser`) a
    Python start-up per command would build, without the start-up."""
    from agl.cli import build_parser

    buf, rc = io.StringIO(), 0
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "200"
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            build_parser().parse_args([*words, "--help"])
    except SystemExit as exit_:
        rc = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return rc, buf.getvalue()


def run_help(argv: tuple[str, ...]) -> tuple[int, str]:
    """`argv --help`: exit status and output, once per session."""
    if argv not in _HELP and argv[:3] == CLI_PREFIX["agl"]:
        _HELP[argv] = _agl_help(argv[3:])
    if argv not in _HELP:
        env = {**os.environ, "DVC_NO_ANALYTICS": "1", "COLUMNS": "200"}
        src = str(ROOT / "src")
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = subprocess.run([*argv, "--help"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        _HELP[argv] = (proc.returncode, proc.stdout + proc.stderr)
    return _HELP[argv]


def prefetch_help(commands: list[list[str]]) -> None:
    """Run the `--help` calls the checks will need in parallel (each is a Python start-up):
    for `agl`/`dvc`/`mlflow`, every prefix of the leading subcommand-like words; for a script
    that uses argparse, its own. Only argparse/click parsers are run, which print help and
    exit before doing anything."""
    wanted: set[tuple[str, ...]] = set()
    for cmd in commands:
        prog, args = cmd[0], cmd[1:]
        if prog in {"python", "python3"} and args[:2] == ["-m", "agl.cli"]:
            prog, args = "agl", args[2:]
        if prog in CLI_PREFIX:
            words = []
            for tok in args[:3]:
                if not re.fullmatch(r"[a-z][a-z0-9-]*", tok):
                    break
                words.append(tok)
            wanted.update((*CLI_PREFIX[prog], *words[:k]) for k in range(len(words) + 1))
        elif prog in {"python", "python3"} and args and args[0].startswith(("stages/", "benchmarks/", "scripts/")):
            path = ROOT / args[0]
            if path.is_file() and "argparse" in path.read_text(encoding="utf-8"):
                wanted.add((sys.executable, str(path)))
        elif prog.startswith("scripts/") and (ROOT / prog).is_file():
            source = (ROOT / prog).read_text(encoding="utf-8")
            if source.startswith("#!/usr/bin/env python") and "argparse" in source:
                wanted.add((sys.executable, str(ROOT / prog)))
    todo = sorted(wanted - _HELP.keys())
    for argv in [argv for argv in todo if argv[:3] == CLI_PREFIX["agl"]]:
        run_help(argv)  # in this process (one thread: argparse and redirect_stdout are global)
    mlflow = [argv for argv in todo if argv[:3] == CLI_PREFIX["mlflow"]]
    with ThreadPoolExecutor(max_workers=4) as pool:
        if mlflow:  # importing mlflow's CLI takes seconds: one process for all its helps
            pool.submit(_mlflow_helps, mlflow)
        list(pool.map(run_help, [argv for argv in todo if argv not in mlflow and argv not in _HELP]))


_MLFLOW_HELPS = """
import json, sys
from click.testing import CliRunner
from mlflow.cli import cli
out = []
for words in json.loads(sys.argv[1]):
    result = CliRunner().invoke(cli, [*words, "--help"], prog_name="mlflow")
    out.append([result.exit_code, result.output])
print(json.dumps(out))
"""


def _mlflow_helps(argvs: list[tuple[str, ...]]) -> None:
    """`mlflow ... --help` for several subcommands in one process (the same click group)."""
    words = [list(argv[3:]) for argv in argvs]
    proc = subprocess.run([sys.executable, "-c", _MLFLOW_HELPS, json.dumps(words)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:
        for argv, (rc, text) in zip(argvs, json.loads(proc.stdout), strict=True):
            _HELP[argv] = (rc, text)


def usage_block(help_text: str) -> str:
    m = re.search(r"usage:(.*?)(\n\s*\n|\Z)", help_text, flags=re.S | re.I)
    return " ".join(m.group(1).split()) if m else ""


def has_subcommands(help_text: str) -> bool:
    usage = usage_block(help_text)
    return bool(re.search(r"(\{[^}]*\}|\b(?:command|COMMAND)\b)\s*(\.\.\.|\[ARGS\]\.\.\.)", usage))


def flag_in_help(flag: str, help_text: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", help_text) is not None


CLI_PREFIX = {
    "agl": (sys.executable, "-m", "agl.cli"),
    "dvc": (sys.executable, "-m", "dvc"),
    "mlflow": (sys.executable, "-m", "mlflow"),
}


def check_cli(name: str, args: list[str], params: dict) -> list[str]:
    """Descend through subcommands while the level has them, then check every flag."""
    prefix = CLI_PREFIX[name]
    words: list[str] = []
    rc, text = run_help(prefix)
    if rc != 0:
        return [f"`{name} --help` exits {rc}"]
    rest = list(args)
    while rest and not is_flag(rest[0]) and has_subcommands(text):
        if re.fullmatch(r"<[^>]*>|[A-Z][A-Z_]*", rest[0]):
            return []  # `agl <command> --help`, `agl COMMAND`: a placeholder, nothing to check
        rc, sub_text = run_help((*prefix, *words, rest[0]))
        if rc != 0:
            return [f"`{' '.join([name, *words])}` has no subcommand {rest[0]!r}"]
        words.append(rest.pop(0))
        text = sub_text
    where = " ".join([name, *words])
    problems = []
    for k, tok in enumerate(rest):
        if not is_flag(tok):
            continue
        flag = tok.split("=", 1)[0]
        if not flag_in_help(flag, text):
            problems.append(f"`{where}` has no option {flag} (not in `{where} --help`)")
        if name == "dvc" and flag in {"-S", "--set-param"}:
            value = tok.split("=", 1)[1] if "=" in tok else (rest[k + 1] if k + 1 < len(rest) else "")
            key = value.split("=", 1)[0].split(":")[-1]
            if "." in key:
                problems += check_param_key(key, params)
    return problems


def script_usage(path: Path) -> str | None:
    """The `usage:` line a non-argparse script documents (with its continuation lines)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for k, line in enumerate(lines):
        m = re.search(r"usage:\s*(?:python\s+)?\S*" + re.escape(path.name) + r"\b(.*)", line)
        if not m:
            continue
        spec = m.group(1)
        for more in lines[k + 1:]:
            if re.match(r"^\s{8,}\[", more):
                spec += " " + more.strip()
            else:
                break
        spec = re.split(r"\s{2,}\(|\(|\"|\s>&2", spec)[0]
        return spec.strip()
    return None


def check_usage(shown: str, spec: str, args: list[str]) -> list[str]:
    """Check a command's arguments against a usage spec such as
    `[--birds BIRDS_CSV] OUT_DIR MANIFEST RUN_DIR [RUN_DIR ...]` or `start|stop|status [DIR]`."""
    flags: dict[str, int] = {}
    required: list[str] = []
    optional, unbounded = 0, False
    for item in re.findall(r"\[[^\]]*\]|\S+", spec):
        inner = item.strip("[]").split()
        if inner and inner[0].startswith("-"):
            flags[inner[0]] = len([w for w in inner[1:] if w != "..."])
        elif "..." in inner:
            unbounded = True
        elif item.startswith("["):
            optional += 1
        else:
            required.append(item)
    problems, positionals, k = [], [], 0
    while k < len(args):
        tok = args[k]
        if is_flag(tok):
            flag = tok.split("=", 1)[0]
            if flag not in flags:
                problems.append(f"`{shown}` has no option {flag} (usage: {spec})")
            elif "=" not in tok:
                k += flags[flag]
        else:
            positionals.append(tok)
        k += 1
    lo, hi = len(required), len(required) + optional
    if len(positionals) < lo or (not unbounded and len(positionals) > hi):
        want = f"{lo}" + ("+" if unbounded else f"-{hi}" if hi != lo else "")
        problems.append(f"`{shown}` takes {want} positional argument(s), the doc gives "
                        f"{len(positionals)} (usage: {spec})")
    for tok, want in zip(positionals, required, strict=False):
        choices = want.split("|")
        if len(choices) > 1 and tok not in choices and tok != want:
            problems.append(f"`{shown}`: {tok!r} is not one of {want} (usage: {spec})")
    return problems


def check_script(rel: str, args: list[str], params: dict) -> list[str]:
    path = ROOT / rel
    if not path.is_file():
        return [f"{rel} does not exist"]
    source = path.read_text(encoding="utf-8")
    if "argparse" in source and (path.suffix == ".py" or source.startswith("#!/usr/bin/env python")):
        rc, text = run_help((sys.executable, str(path)))
        if rc != 0:
            return [f"`{rel} --help` exits {rc}"]
        return [f"`{rel}` has no option {t.split('=')[0]} (not in its --help)"
                for t in args if is_flag(t) and not flag_in_help(t.split("=")[0], text)]
    spec = script_usage(path)
    if spec is None:
        return [f"`{rel}` is given arguments but documents no usage line"] if args else []
    return check_usage(rel, spec, args)


def check_command(cmd: list[str], params: dict) -> list[str]:
    prog, args = cmd[0], cmd[1:]
    if prog in CLI_PREFIX:
        return check_cli(prog, args, params)
    if prog in {"python", "python3"}:
        if args[:1] == ["-m"] and len(args) > 1:
            module = args[1]
            if module == "agl.cli":
                return check_cli("agl", args[2:], params)
            if module in {"dvc", "mlflow"}:
                return check_cli(module, args[2:], params)
            if module in UNCHECKED_MODULES:
                return []
            return [f"`python -m {module}`: not checked; add it to UNCHECKED_MODULES or a checker"]
        if args and args[0].startswith(("stages/", "benchmarks/", "scripts/")):
            return check_script(args[0], args[1:], params)
        return [f"`{' '.join(cmd)}`: no checker for this python invocation"]
    rel = prog[2:] if prog.startswith("./") else prog
    if rel.startswith(("scripts/", ".ci/", "stages/", "benchmarks/")):
        return check_script(rel, args, params)
    if prog in UNCHECKED_PROGRAMS:
        return []
    return [f"`{prog}`: unknown program; check it or add it to UNCHECKED_PROGRAMS with a reason"]


COMMAND_SPAN = re.compile(r"^(agl|dvc|mlflow)(\s|$)|^python3? (-m |stages/|benchmarks/|scripts/)"
                          r"|^(\./)?(scripts|\.ci)/\S+\s")


def is_command_span(span: str) -> bool:
    """`agl evaluate ...`, `python stages/x.py ...`, `scripts/x start`; a bare path such as
    `scripts/mlflow-server` is a mention of the file (checked as a path), not a call."""
    return bool(COMMAND_SPAN.match(span)) or span == ".ci/run"


def page_commands(page: Path) -> list[list[str]]:
    """Every command a page shows, in fenced shell blocks and inline spans (for prefetching)."""
    fences, paragraphs = split_markdown(page.read_text(encoding="utf-8"))
    lines = [line for f in fences if f.lang in SHELL_LANGS for line in shell_commands(f.body, f.lang)]
    lines += [span for _, para in paragraphs for span in code_spans(para) if is_command_span(span)]
    commands = []
    for line in lines:
        try:
            commands += simple_commands(line)
        except ValueError:
            pass  # reported by check_page
    return commands


# ---------------------------------------------------------------- params, links, paths


def check_param_key(path: str, params: dict) -> list[str]:
    if path in PENDING_PARAM_KEYS:
        return []

    def walk(node, parts: list[str]) -> bool:
        if not parts:
            return True
        head, rest = parts[0], parts[1:]
        if not isinstance(node, dict):
            return False
        if re.fullmatch(r"<[^>]*>|\$\{[^}]*\}|\*", head):  # a placeholder: any key there
            return any(walk(v, rest) for v in node.values())
        return head in node and walk(node[head], rest)

    ok = walk(params, path.split("."))
    return [] if ok else [f"params.yaml has no key {path}"]


def param_path_in_span(span: str, params: dict) -> str | None:
    span = re.sub(r"^params\.yaml[:\s]\s*", "", span)
    m = re.fullmatch(r"([a-z_][a-z0-9_]*(?:\.(?:[A-Za-z0-9_-]+|<[^>]*>|\$\{[^}]*\}))+)"
                     r"(?:\s*[:=].*)?", span)
    if not m:
        return None
    path = m.group(1)
    parts = path.split(".")
    if parts[0] not in params or parts[-1] in FILE_EXTENSIONS or path in NOT_PARAM_KEYS:
        return None
    return path


def repo_path_in_span(span: str) -> str | None:
    if not span.startswith(REPO_PATH_PREFIXES) or " " in span.split(":")[0].strip():
        return None
    path = re.split(r"::|:\s|\s", span)[0].rstrip(":,.")
    return path


def check_repo_path(path: str) -> list[str]:
    pattern = re.sub(r"<[^>]*>", "*", path)
    if "*" in pattern:
        return [] if list(ROOT.glob(pattern)) else [f"no file matches {path}"]
    return [] if (ROOT / path).exists() else [f"{path} does not exist"]


def check_module_ref(ref: str) -> list[str]:
    """`agl.dataset.manifest.load_manifest`: the module exists under src/, and the first name
    after it is defined (or imported) there. Read, not imported: no heavy import at test time."""
    parts = ref.split(".")
    for k in range(len(parts), 0, -1):
        base = ROOT / "src" / Path(*parts[:k])
        module = next((m for m in (base.with_suffix(".py"), base / "__init__.py") if m.is_file()), None)
        if module:
            break
    else:
        return [f"no module {ref} under src/"]
    if k == len(parts):
        return []
    name = parts[k]
    source = module.read_text(encoding="utf-8")
    defined = re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^{name}\s*[:=]"
                        rf"|^\s*(?:from\s+\S+\s+)?import\s.*\b{name}\b", source, flags=re.M)
    return [] if defined else [f"{'.'.join(parts[:k])} has no {name} ({ref})"]


def check_link(target: str, page: Path) -> list[str]:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):  # http:, https:, mailto:
        return []
    file_part, _, fragment = target.partition("#")
    dest = (page.parent / file_part).resolve() if file_part else page
    if not dest.exists():
        return [f"link {target} -> {dest} does not exist"]
    if fragment and dest.suffix == ".md" and fragment not in github_slugs(dest.read_text(encoding="utf-8")):
        return [f"link {target}: {dest.name} has no heading #{fragment}"]
    return []


def check_yaml(fence: Fence, params: dict) -> list[str]:
    try:
        doc = yaml.safe_load(fence.body)
    except yaml.YAMLError as exc:
        return [f"yaml block does not parse: {' '.join(str(exc).split())}"]
    if not isinstance(doc, dict) or not doc or not all(k in params for k in doc):
        return []  # not a params.yaml excerpt
    problems = []
    for section, body in doc.items():
        if section in FREE_FORM_SECTIONS or not isinstance(body, dict):
            continue
        problems += [f"params.yaml excerpt: {section}.{key} is not a key of params.yaml"
                     for key in body if not isinstance(params[section], dict)
                     or key not in params[section]]
    return problems


# ---------------------------------------------------------------- one page


def check_page(page: Path, params: dict) -> list[str]:
    text = page.read_text(encoding="utf-8")
    fences, paragraphs = split_markdown(text)
    problems: list[str] = []

    def command_problems(line: str, where: str) -> list[str]:
        try:
            cmds = simple_commands(line)
        except ValueError as exc:
            return [f"{where}: cannot parse `{line}` ({exc})"]
        return [f"{where}: {p}" for c in cmds for p in check_command(c, params)]

    for fence in fences:
        where = f"{page.name}:{fence.line}"
        if not fence.lang:
            problems.append(f"{where}: fenced block without a language (bash, yaml, text, ...)")
        elif fence.lang in SHELL_LANGS:
            for line in shell_commands(fence.body, fence.lang):
                problems += command_problems(line, where)
        elif fence.lang in {"yaml", "yml"}:
            problems += [f"{where}: {p}" for p in check_yaml(fence, params)]
    for line_no, para in paragraphs:
        where = f"{page.name}:{line_no}"
        for target in links(para):
            problems += [f"{where}: {p}" for p in check_link(target, page)]
        for span in code_spans(para):
            if is_command_span(span):
                problems += command_problems(span, where)
            key = param_path_in_span(span, params)
            if key:
                problems += [f"{where}: {p}" for p in check_param_key(key, params)]
            path = repo_path_in_span(span)
            if path:
                problems += [f"{where}: {p}" for p in check_repo_path(path)]
            if re.fullmatch(r"agl(\.[A-Za-z_]\w*)+", span):
                problems += [f"{where}: {p}" for p in check_module_ref(span)]
    return problems


@pytest.fixture(scope="module")
def params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_commands_links_keys_and_paths_are_real(page, params):
    # This page's helps only (kept for the pages after it in this worker): under xdist each
    # worker starts the processes for the pages it was handed, not for every page.
    prefetch_help(page_commands(page))
    problems = check_page(page, params)
    assert not problems, "\n".join(problems)


def test_readme_fits_on_a_screen_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    linked = {(ROOT / t.partition("#")[0]).resolve()
              for _, p in split_markdown(readme)[1] for t in links(p)
              if not re.match(r"^[a-z]+:", t)}
    missing = [p.name for p in doc_pages()[1:] if p.resolve() not in linked]
    assert not missing, f"README.md does not link docs page(s): {missing}"


# Parallel on every core (pytest-xdist); the tests that share the built demo share its group.
TEST_COMMAND = 'pip install -e ".[test]" && python -m pytest -q -n auto --dist loadgroup'


def test_readme_keeps_the_two_fresh_machine_commands():
    """.ci/run and tests/test_pipeline_demo.py run exactly these."""
    fences, _ = split_markdown((ROOT / "README.md").read_text(encoding="utf-8"))
    bodies = [f.body.strip() for f in fences if f.lang == "bash"]
    assert "pip install -e . && agl download && dvc repro" in bodies
    assert TEST_COMMAND in bodies
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == TEST_COMMAND, "the last line of .ci/run must be the README's test command"


# ---------------------------------------------------------------- the checker itself

FIXTURE = """# A page

Run `agl evaluate run.jsonl --manifest m.csv --protocol strict` and see [data](other.md#the-data).

```bash
agl evaluate P --manifest M --no-such-flag   # a flag the command does not have
agl no-such-command --x
dvc exp run --queue --no-such-dvc-flag -S evaluate.no_such_key=1
scripts/mlflow-server start one two
python stages/evaluate.py a b c d --bogus
scripts/mlflow-server restart
scripts/sensitivity-sweep --gamma 1000 --no-such-sweep-flag
frobnicate --now
```

Knobs: `evaluate.metric_bootstrap`, `evaluate.no_such_knob`, `paper.published.<name>.sha256`.
Code: `src/agl/no_such_module.py`, `stages/evaluate.py`. Broken: [x](missing.md), [y](other.md#nope).
Modules: `agl.scoring.evaluate.evaluate_run`, `agl.evaluate`, `agl.core.geo.no_such_function`.

```
no language here
```
"""


def test_checker_finds_every_kind_of_drift(tmp_path, params):
    (tmp_path / "other.md").write_text("# The data\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(FIXTURE, encoding="utf-8")
    problems = "\n".join(check_page(page, params))
    expected = [
        "`agl evaluate` has no option --no-such-flag",
        "`agl` has no subcommand 'no-such-command'",
        "`dvc exp run` has no option --no-such-dvc-flag",
        "params.yaml has no key evaluate.no_such_key",
        "`scripts/mlflow-server` takes 1-2 positional argument(s), the doc gives 3",
        "`stages/evaluate.py` has no option --bogus",
        "'restart' is not one of start|stop|status",
        "`scripts/sensitivity-sweep` has no option --no-such-sweep-flag",
        "`frobnicate`: unknown program",
        "params.yaml has no key evaluate.no_such_knob",
        "src/agl/no_such_module.py does not exist",
        "link missing.md",
        "other.md has no heading #nope",
        "fenced block without a language",
        "agl has no evaluate (agl.evaluate)",
        "agl.core.geo has no no_such_function",
    ]
    for want in expected:
        assert want in problems, f"not reported: {want}\n--- reported:\n{problems}"
    # ...and nothing correct is reported: one line per expected problem (the agl line twice
    # over is impossible: each problem names its own flag, key or path).
    assert len(problems.splitlines()) == len(expected), problems
    for fine in ("--protocol", "--manifest", "--queue", "evaluate.metric_bootstrap", "sha256",
                 "stages/evaluate.py does not exist", "other.md#the-data"):
        assert f"no option {fine}" not in problems and f"no key {fine}" not in problems
        assert f"link {fine}" not in problems


def test_a_correct_page_passes(tmp_path, params):
    page = tmp_path / "ok.md"
    page.write_text(
        "# Fine\n\n```bash\nagl infer --backend gemini --model m --manifest x --audio-root a "
        "--out o --dry-run\ndvc exp run -S evaluate.metric_bootstrap=500\n"
        "python stages/leaderboard.py build --runs build/runs --paper build/paper\n"
        "scripts/mlflow-server status\n```\n\n"
        "```yaml\nevaluate: {metric_bootstrap: 500}\nmodels:\n  mine: {backend: random}\n```\n\n"
        "See [here](#fine), `agl models --yaml NAME` and `params.yaml: paper.base_url`.\n",
        encoding="utf-8")
    assert check_page(page, params) == []


def test_the_readme_names_every_default_model():
    """The README's list of default runs once left out langprior, which the demo runs."""
    models = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["models"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [m for m in models if f"`{m}`" not in readme] == []


def test_every_agl_command_is_in_the_pipeline_table():
    """docs/pipeline.md's command table lists every subcommand `agl --help` has (it lacked
    exp, mlflow and power), and nothing that is not one."""
    import argparse

    from agl.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = (ROOT / "docs" / "pipeline.md").read_text(encoding="utf-8")
    table = text.split("## The command line", 1)[1]
    listed = set(re.findall(r"^\| `agl ([a-z]+)[^`]*` \|", table, flags=re.M))
    assert listed == set(sub.choices), (sorted(set(sub.choices) - listed), sorted(listed - set(sub.choices)))
