"""What README.md and docs/*.md show a reader, as values tests/unit/test_docs.py can check: fenced code
blocks, inline code spans, the command lines in them (split into words as a shell would), links, and what a
Python command among them would run (its script and flags, read with ast, never run), each
with the file and line it starts on. Pure text work: no TensorFlow, no processes."""

from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib
import re
import shlex

REPO = pathlib.Path(__file__).resolve().parents[1]
PROGRAMS = ("tfdist", "python", "python3", "make")  # the commands whose words are checked
SEPARATORS = ("|", "||", "&&", ";", "·")  # between commands on one line (`|` also between alternatives)
INVALID_MARK = "<!-- invalid -->"  # before a fenced block: an example of a mistake, which must fail


@dataclasses.dataclass(frozen=True)
class Snippet:
    """A fenced block (`info` its info string, "" for none) or an inline code span (`info` is None)."""

    file: str  # relative to the repository, e.g. docs/launch.md
    line: int  # where it starts (a block: its first line inside the fence)
    text: str
    info: str | None
    marks: frozenset[str] = frozenset()

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclasses.dataclass(frozen=True)
class CommandLine:
    """One command as the reader would type it: `words` after the shell's quoting, with the docs' notation
    undone (`[--slots N]` -> `--slots N`, `...` dropped) and the line's comment removed."""

    snippet: Snippet
    line: int
    words: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.snippet.file}:{self.line}"

    @property
    def text(self) -> str:
        return " ".join(self.words)


def doc_files() -> list[pathlib.Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def relative(path: pathlib.Path) -> str:
    return str(path.relative_to(REPO))


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`]*)$")
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_EXTERNAL_LINK = re.compile(r"\[([^\]]*)\]\([a-z]+:[^)]*\)")
_COMMENT = re.compile(r"^\s*<!--(.*?)-->\s*$")


def split_markdown(name: str, text: str) -> tuple[list[Snippet], list[tuple[int, str]]]:
    """A Markdown file's fenced blocks, and its prose as (first line number, paragraph) outside them."""
    lines = text.splitlines()
    blocks: list[Snippet] = []
    prose: list[tuple[int, str]] = []
    paragraph: list[str] = []
    start = 0
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            if paragraph:
                prose.append((start, "\n".join(paragraph)))
                paragraph = []
            marks = _marks(lines, i)
            body, j = [], i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence.group(1)):
                body.append(lines[j])
                j += 1
            blocks.append(Snippet(name, i + 2, "\n".join(body), fence.group(2).strip(), marks))
            i = j + 1
            continue
        if lines[i].strip():
            if not paragraph:
                start = i + 1
            paragraph.append(lines[i])
        elif paragraph:
            prose.append((start, "\n".join(paragraph)))
            paragraph = []
        i += 1
    if paragraph:
        prose.append((start, "\n".join(paragraph)))
    return blocks, prose


def _marks(lines: list[str], fence_at: int) -> frozenset[str]:
    """`<!-- invalid -->` on the last non-blank line before a fence marks the block."""
    for line in reversed(lines[:fence_at]):
        if line.strip():
            comment = _COMMENT.match(line)
            return frozenset({comment.group(1).strip()}) if comment else frozenset()
    return frozenset()


def inline_spans(name: str, prose: list[tuple[int, str]]) -> list[Snippet]:
    """Each code span; one in the text of a link to a URL is marked "elsewhere" (a path in another
    project's repository)."""
    spans = []
    for start, paragraph in prose:
        away = [m.span(1) for m in _EXTERNAL_LINK.finditer(paragraph)]
        for match in _SPAN.finditer(paragraph):
            line = start + paragraph.count("\n", 0, match.start())
            marks = frozenset({"elsewhere"} if any(a <= match.start() < b for a, b in away) else ())
            spans.append(Snippet(name, line, " ".join(match.group(2).split()), None, marks))
    return spans


def links(name: str, prose: list[tuple[int, str]]) -> list[tuple[str, int, str]]:
    """(file, line, target) of every Markdown link in the prose."""
    found = []
    for start, paragraph in prose:
        for match in _LINK.finditer(_SPAN.sub(lambda m: " " * len(m.group(0)), paragraph)):
            found.append((name, start + paragraph.count("\n", 0, match.start()), match.group(1)))
    return found


def snippets_of(name: str, text: str) -> list[Snippet]:
    blocks, prose = split_markdown(name, text)
    return blocks + inline_spans(name, prose)


def read(path: pathlib.Path) -> tuple[str, str]:
    return relative(path), path.read_text(encoding="utf-8")


# ---------------------------------------------------------------- command lines

SHELL_BLOCKS = ("", "sh", "bash", "shell", "console", "text")


def command_lines(snippet: Snippet) -> list[CommandLine]:
    """The commands a snippet shows. A block with `$ ` prompts: only the prompted lines (the rest is
    output); otherwise every line of a shell block (continuations joined). An inline span: itself. Only
    commands of PROGRAMS (or a path ending in one, e.g. .venv/bin/python) are returned."""
    if snippet.info is None:
        candidates = [(snippet.line, snippet.text)]
    elif (snippet.info.split() or [""])[0] in SHELL_BLOCKS:
        candidates = _block_lines(snippet)
    else:
        return []
    found = []
    for line, text in candidates:
        try:
            words = shlex.split(_without_comment(text))
        except ValueError:  # an unbalanced quote: not a command line (output, prose)
            continue
        for words in _commands(_undo_notation(words)):
            if words and program(words[0]) in PROGRAMS and not words[0].startswith("$"):
                found.append(CommandLine(snippet, line, tuple(words)))
    return found


def program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _block_lines(snippet: Snippet) -> list[tuple[int, str]]:
    lines = snippet.text.split("\n")
    prompted = any(line.startswith("$ ") for line in lines)
    result: list[tuple[int, str]] = []
    pending, first = "", 0
    for number, line in enumerate(lines, snippet.line):
        if prompted and not pending:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        result.append((first, pending + line))
        pending = ""
    return result


def _without_comment(text: str) -> str:
    """The line up to a `#` that starts a word outside quotes (a shell comment)."""
    quote = None
    for i, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i]
    return text


def _undo_notation(words: list[str]) -> list[str]:
    """Usage notation to plain words: `[--rank R]` -> `--rank R`, `...` and `…` dropped."""
    result = []
    for word in words:
        if word.startswith("["):
            word = word[1:]
        if word.endswith("]") and "[" not in word:
            word = word[:-1]
        if word and word not in ("...", "…"):
            result.append(word)
    return result


def _commands(words: list[str]) -> list[list[str]]:
    """Split at SEPARATORS. A piece after `|` that starts with a flag is an alternative to the previous
    command's last word (`tfdist metrics ID --json | --csv`); `tfdist jobs/job/logs` is three commands."""
    pieces: list[list[str]] = [[]]
    for word in words:
        if word in SEPARATORS:
            pieces.append([])
        else:
            pieces[-1].append(word)
    commands: list[list[str]] = []
    for piece in pieces:
        if piece and piece[0].startswith("-") and commands:
            piece = commands[-1][:-1] + piece
        if len(piece) >= 2 and program(piece[0]) == "tfdist" and "/" in piece[1]:
            commands += [[piece[0], name, *piece[2:]] for name in piece[1].split("/")]
        elif piece:
            commands.append(piece)
    return commands


_PLACEHOLDER = re.compile(r"^(<[^<>]+>|[A-Z][A-Z_]*([:.=/-][A-Za-z_]+)*(\.\.\.)?)$")


def is_placeholder(word: str) -> bool:
    """A value the docs leave to the reader: ID, HOST:PORT, FILE, N, LOW-HIGH, FILE.png, NAME=VALUE, <dir>."""
    return bool(_PLACEHOLDER.match(word))


_REPO_PATH = re.compile(r"^(examples|benchmarks|tools|tests|cluster|tfdist|docs)/[\w./-]*$")


def repo_path(word: str) -> str | None:
    """`word` as a path into the repository (examples/digits/train.py), or None for anything else
    (a user's train.py, /etc/..., a path with a placeholder in it)."""
    word = word.split("=", 1)[-1] if word.startswith("-") else word
    return word if _REPO_PATH.match(word) and not re.search(r"[A-Z]{2,}", word) else None


# ---------------------------------------------------------------- a Python command

def script_problem(words: list[str]) -> str | None:
    """A Python command: its script exists and takes the flags given (a repository script), or is given no
    arguments (anyone else's script: nothing could check them)."""
    if not words:
        return None
    rest = list(words[1:])
    if program(words[0]) in ("python", "python3"):
        while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
            rest.pop(0)
        if not rest or rest[0] == "-c":
            return None
        if rest[0] == "-m":
            return module_problem(rest[1]) if len(rest) > 1 else None
        script, rest = rest[0], rest[1:]
    elif words[0].endswith(".py"):
        script = words[0]
    else:
        return None
    if repo_path(script):
        if not (REPO / script).is_file():
            return f"{script} does not exist in the repository"
        return flags_problem(script, rest)
    if rest:
        return (f"{script} is not a script of the repository, so its arguments {' '.join(rest)!r} cannot be "
                "checked: show a repository script (examples/...) with them, or leave them out")
    return None


def module_problem(module: str) -> str | None:
    if module.split(".")[0] not in ("cluster", "tfdist", "tests", "benchmarks", "tools"):
        return None
    base = REPO / module.replace(".", "/")
    if base.with_suffix(".py").is_file() or (base / "__main__.py").is_file():
        return None
    return f"python -m {module}: no such module in the repository"


@functools.lru_cache(maxsize=None)
def script_options(script: str) -> tuple[frozenset[str], bool]:
    """The flags a script's add_argument calls declare, and whether it reads sys.argv at all."""
    flags, reads_argv = set(), False
    for node in ast.walk(ast.parse((REPO / script).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            reads_argv = True
            flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")}
        if isinstance(node, ast.Attribute) and node.attr == "argv":
            reads_argv = True
    return frozenset(flags | ({"-h", "--help"} if flags else set())), reads_argv


def flags_problem(script: str, arguments: list[str]) -> str | None:
    flags, reads_argv = script_options(script)
    if arguments and not reads_argv:
        return f"{script} takes no arguments, but is given {' '.join(arguments)!r}"
    if not flags:
        return None
    unknown = [a for a in arguments if a.startswith("-") and a.split("=")[0] not in flags]
    if unknown:
        return f"{script} has no {', '.join(unknown)} (its flags: {', '.join(sorted(flags))})"
    return None
