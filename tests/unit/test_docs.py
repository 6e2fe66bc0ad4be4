"""Docs are tested (issue 18, Must 12): every command README.md and docs/*.md show is parsed by the real
parser of its program, so docs and behaviour cannot drift apart unseen (Measured 13: a usage line
missing five flags, `-- python train.py --epochs 3` failing on the repository's examples, a SIGTERM that
preempts documented as a cancel...).

- `tfdist ...`: cli.build_parser() parses it (launch: with `--slurm`'s sbatch options split off and
  checked as `tfdist launch` does); the docs' placeholders (ID, HOST:PORT, FILE, N) pass any type. A span
  in prose may name one flag of a command (`tfdist coordinator --subnet CIDR`): required arguments are
  not asked of it; a fenced block's command must be complete.
- `python SCRIPT ARGS` (also as `tfdist launch`'s command or a config's entrypoint): a repository script
  exists and has every flag given (its add_argument calls, read with ast, never run); a script outside
  the repository (a user's train.py) is shown without arguments, since nothing could check them.
- `make TARGET`: a rule of the Makefile. A path into the repository (examples/..., cluster/...): exists.
  A link: its file exists, and its #anchor is a heading there.
- A `yaml` block is a config: it validates through cluster/shared/config.py; one marked `<!-- invalid -->`
  on the line before its fence shows a mistake and must be refused.
- A usage block (a plain fenced `tfdist COMMAND [--flag ...]` line): exactly the parser's flags.
- docs/launch.md's exit-code table: every code cluster/client/exit_codes.py defines, and no other.
- The worker API (tests/doc_api.py): `tfdist.NAME(keyword=...)`, `from tfdist.X import Y` and `ctx.NAME`
  exist in tfdist's source with those keywords; a ```python block parses.

Every failure names the file and line, the command and what is wrong. Fix the doc, or, where the doc is
right, the code. Pure parsing: no TensorFlow, no process started.
"""

from __future__ import annotations

import argparse
import functools
import re

import pytest

from cluster.client import cli, exit_codes
from cluster.client.slurm_submit import check_options, split_argv
from cluster.shared.config import ConfigError, ExperimentConfig, load_config, parse_config, with_overrides
from tests import doc_api, doc_snippets as docs
from tfdist.errors import TfdistError

REPO = docs.REPO


def snippets() -> list[docs.Snippet]:
    return [s for path in docs.doc_files() for s in docs.snippets_of(*docs.read(path))]


# ---------------------------------------------------------------- the checkers (pure: a snippet in, problems out)

class _Choices(list):
    """An argument's choices, plus any placeholder (`--distribution MODE`)."""

    def __contains__(self, value) -> bool:
        return (isinstance(value, str) and docs.is_placeholder(value)) or list.__contains__(self, value)


def _lenient(action: argparse.Action, complete: bool) -> None:
    if callable(action.type):
        action.type = functools.partial(lambda typed, text: text if docs.is_placeholder(text) else typed(text),
                                        action.type)
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        action.choices = _Choices(action.choices)
    if not complete:  # a span naming one flag of a command (`tfdist metrics --plot`)
        action.required = False
        if action.nargs is None and not isinstance(action, argparse._SubParsersAction):
            action.nargs = "?"


@functools.lru_cache(maxsize=None)
def parser(complete: bool) -> argparse.ArgumentParser:
    """The real `tfdist` parser; abbreviations refused (the docs spell every flag out)."""
    root = cli.build_parser()
    for each in (root, *subparsers(root).values()):
        each.allow_abbrev = False
        for action in each._actions:
            _lenient(action, complete)
    return root


def subparsers(root: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in root._actions if isinstance(a, argparse._SubParsersAction)).choices


def tfdist_problem(command: docs.CommandLine) -> str | None:
    argv, sbatch = list(command.words[1:]), None
    if argv and docs.is_placeholder(argv[0]):  # `tfdist X.Y.Z`: what --version prints
        return None
    if argv[:1] == ["launch"]:
        argv, sbatch = split_argv(argv)
    try:
        args = parser(command.snippet.info is not None).parse_args(argv)
        if sbatch:
            check_options(sbatch)
        if args.command == "launch":
            return launch_problem(args)
    except (TfdistError, SystemExit) as e:
        return str(e) or "exits"
    return None


def launch_problem(args: argparse.Namespace) -> str | None:
    """`tfdist launch`'s flags over its config, as job_commands does; then the command the workers run."""
    config = ExperimentConfig()
    if args.config and docs.repo_path(args.config):
        config = load_config(str(REPO / args.config), hparams=[h for h in args.hparam or ()
                                                                if not docs.is_placeholder(h)])
    given = {name: None if value is None or docs.is_placeholder(str(value)) else value
             for name, value in (("slots", args.slots), ("distribution", args.distribution))}
    with_overrides(config, **given)
    entry = args.entry[1:] if args.entry[:1] == ["--"] else args.entry
    return docs.script_problem(entry or list(config.entrypoint))


@functools.lru_cache(maxsize=None)
def make_targets() -> frozenset[str]:
    rules = re.findall(r"^([^\s#:=][^:=]*?)\s*::?(?!=)", (REPO / "Makefile").read_text(), re.M)
    return frozenset(t for rule in rules for t in rule.split())


def make_problem(words: tuple[str, ...]) -> str | None:
    missing = [w for w in words[1:] if not w.startswith("-") and "=" not in w and w not in make_targets()]
    return f"the Makefile has no target {', '.join(missing)}" if missing else None


def command_problems(snippet: docs.Snippet) -> list[str]:
    problems = []
    for command in docs.command_lines(snippet):
        name = docs.program(command.words[0])
        if name == "tfdist":
            problem = tfdist_problem(command)
        elif name == "make":
            problem = make_problem(command.words)
        else:
            problem = docs.script_problem(list(command.words))
        if problem:
            problems.append(f"{command.where}: `{command.text}`: {problem}")
    return problems


def path_problems(snippet: docs.Snippet) -> list[str]:
    words = [snippet.text] if snippet.info is None and "elsewhere" not in snippet.marks else []
    words += [w for command in docs.command_lines(snippet) for w in command.words]
    missing = []
    for word in words:
        path = docs.repo_path(word)
        if path and not any(p.exists() for p in (REPO / path, REPO / (path.rsplit(".", 1)[0] + ".py"),
                                                  REPO / (path + ".py"))):
            missing.append(f"{snippet.where}: `{path}` does not exist in the repository")
    return missing


def config_problems(snippet: docs.Snippet) -> list[str]:
    if snippet.info is None or (snippet.info.split() or [""])[0] not in ("yaml", "yml"):
        return []
    if re.search(r"^apiVersion: ", snippet.text, re.M) and re.search(r"^kind: ", snippet.text, re.M):
        return kubernetes_object_problems(snippet)
    try:
        config = parse_config(snippet.text, source=f"{snippet.where} (a YAML block)")
    except ConfigError as e:
        if "invalid" in snippet.marks:
            return []
        return [f"{e} (an example of a mistake? put {docs.INVALID_MARK} on the line before its fence)"]
    if "invalid" in snippet.marks:
        return [f"{snippet.where}: this YAML block is marked {docs.INVALID_MARK} but the config loader accepts it"]
    problem = docs.script_problem(list(config.entrypoint))
    return [f"{snippet.where}: entrypoint `{' '.join(config.entrypoint)}`: {problem}"] if problem else []


def kubernetes_object_problems(snippet: docs.Snippet) -> list[str]:
    """A Kubernetes object a doc shows (a NetworkPolicy): YAML with its kind's required fields, not a config."""
    import yaml

    try:
        obj = yaml.safe_load(snippet.text)
    except yaml.YAMLError as e:
        return [f"{snippet.where}: not YAML: {e}"]
    missing = [k for k in ("apiVersion", "kind", "metadata", "spec") if k not in obj]
    return [f"{snippet.where}: a Kubernetes object without {', '.join(missing)}"] if missing else []


def usage_problems(snippet: docs.Snippet) -> list[str]:
    """A plain fenced block of `tfdist COMMAND [--flag ...]` lines (indented lines continue one) is the
    command's usage: it shows every flag the parser has, and none it lacks."""
    if snippet.info != "":
        return []
    problems, usages = [], []
    for number, line in enumerate(snippet.text.split("\n"), snippet.line):
        if line.startswith("tfdist ") and "[-" in line:
            usages.append([number, line])
        elif line[:1].isspace() and usages and line.strip():
            usages[-1][1] += " " + line.strip()
    commands = subparsers(parser(True))
    for number, usage in usages:
        name = usage.split()[1]
        if name not in commands:
            problems.append(f"{snippet.file}:{number}: usage of `tfdist {name}`: no such command")
            continue
        shown = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", usage))
        actions = [a for a in commands[name]._actions if a.option_strings and "--help" not in a.option_strings]
        missing = [a.option_strings[-1] for a in actions if not shown & set(a.option_strings)]
        unknown = sorted(shown - {flag for a in actions for flag in a.option_strings})
        if missing or unknown:
            problems.append(f"{snippet.file}:{number}: usage of `tfdist {name}` " + "; ".join(
                part for part in (missing and f"lacks {', '.join(missing)}",
                                  unknown and f"shows {', '.join(unknown)}, which it does not have") if part))
    return problems


def _slug(heading: str) -> str:
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


@functools.lru_cache(maxsize=None)
def anchors(name: str) -> frozenset[str]:
    blocks, prose = docs.split_markdown(name, (REPO / name).read_text(encoding="utf-8"))
    return frozenset(_slug(line.lstrip("#")) for _, paragraph in prose for line in paragraph.split("\n")
                     if re.match(r"^#{1,6} ", line))


def link_problems(name: str, text: str) -> list[str]:
    problems = []
    for file, line, target in docs.links(name, docs.split_markdown(name, text)[1]):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (REPO / name).parent / path if path else REPO / name
        if not resolved.exists():
            problems.append(f"{file}:{line}: link to {target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(docs.relative(resolved.resolve())):
            problems.append(f"{file}:{line}: link to {target}: no heading #{anchor} there")
    return problems


# Claims Measured 13 found false. Prose cannot be parsed, so each stays here: written again, it fails.
FALSE_CLAIMS = (
    ("docs/launch.md", r"SIGTERM to `tfdist launch`\W*cancels",
     "SIGTERM to a following `tfdist launch` preempts the job (exit 75); Ctrl-C cancels it (130)"),
    ("docs/launch.md", r"refused before any worker starts",
     "through a coordinator a missing script fails on its node, exit 127 (locally: before anything starts)"),
    ("README.md", r"Run the first two with", "each example's own command runs it"),
)


def claim_problems(name: str, text: str) -> list[str]:
    problems = []
    for file, pattern, truth in FALSE_CLAIMS:
        for match in re.finditer(pattern.replace(" ", r"\s+"), text) if file == name else ():
            said = " ".join(match.group(0).split())
            problems.append(f"{name}:{text.count(chr(10), 0, match.start()) + 1}: says {said!r}: "
                            f"not so ({truth})")
    if name != "docs/roadmap.md":  # what is planned is said in one place, which says what is done too
        for start, paragraph in docs.split_markdown(name, text)[1]:
            if re.search(r"\broadmap\b", re.sub(r"\[[^\]]*\]\([^)]*\)", "", paragraph), re.I):
                problems.append(f"{name}:{start}: calls something 'roadmap': docs/roadmap.md says what is "
                                "planned (link to it), and a feature that exists is documented, not planned")
    return problems


# ---------------------------------------------------------------- the docs

CHECKS = (command_problems, path_problems, config_problems, usage_problems, doc_api.api_problems)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_every_snippet_of_the_docs(check):
    problems = [p for snippet in snippets() for p in check(snippet)]
    assert not problems, "\n".join(problems)


def test_the_docs_show_commands_of_every_kind():
    """The extraction finds what the docs show (a test that finds nothing would pass whatever they say)."""
    found = [c for s in snippets() for c in docs.command_lines(s)]
    shown = {docs.program(c.words[0]) + " " + c.words[1] for c in found if len(c.words) > 1}
    commands = set(subparsers(parser(True)))
    assert {f"tfdist {name}" for name in commands} <= shown, sorted(shown)
    assert {"make demo", "make test"} <= shown
    assert sum(1 for s in snippets() if s.info in ("yaml", "yml")) >= 3


def test_links_and_claims():
    problems = [p for path in docs.doc_files() for check in (link_problems, claim_problems)
                for p in check(*docs.read(path))]
    assert not problems, "\n".join(problems)


def test_the_exit_code_table_lists_what_exit_codes_py_returns():
    """Every code exit_codes.py defines is in the table (exactly or in a range row), and every exact code
    the table shows is one it defines."""
    text = (REPO / "docs" / "launch.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    cells = re.findall(r"^\| ([^|]*`[^|]*) \|", section, re.M)
    exact, ranges = set(), []
    for cell in cells:
        numbers = [int(n) for n in re.findall(r"`(\d+)`", cell)]
        if "128+N" in cell:
            ranges.append(range(129, 256))
        elif len(numbers) == 2 and "-" in cell:
            ranges.append(range(numbers[0], numbers[1] + 1))
        else:
            exact |= set(numbers)
    defined = {name: value for name, value in vars(exit_codes).items() if name.isupper() and type(value) is int}
    missing = {n: v for n, v in defined.items() if v not in exact and not any(v in r for r in ranges)}
    assert not missing, f"docs/launch.md's exit-code table lacks {missing} (cluster/client/exit_codes.py)"
    assert exact <= set(defined.values()), f"docs/launch.md's table shows {exact - set(defined.values())}, " \
                                           "which cluster/client/exit_codes.py does not define"


# ---------------------------------------------------------------- the checker catches what Measured 13 found

MEASURED = """\
```
tfdist launch [--config FILE] [--slots N] [--distribution MODE] [--startup-timeout SECONDS] [-- COMMAND...]
```

```sh
tfdist launch --slots 2 -- python train.py --epochs 3     # 2 workers on this machine
tfdist launch --slots 2 -- python examples/digits/train.py --epochs 3
tfdist logs ID --follw · tfdist metrics ID --json | --cvs
make dmeo
```

Run `python benchmarks/nothing_here.py` or `tfdist coordinator --subnett CIDR`, see `examples/digit`.

<!-- invalid -->
```yaml
resources: {slots_per_trial: 2}
```

```yaml
searcher: {name: random}
```

The metric callbacks are on the roadmap.

- **Ctrl-C / SIGTERM to `tfdist launch`**: cancels the job. A missing script or program is refused before any
  worker starts.
"""


def test_the_checker_catches_what_measured_13_found():
    found = [p for snippet in docs.snippets_of("docs/launch.md", MEASURED) for check in CHECKS
             for p in check(snippet)] + claim_problems("docs/launch.md", MEASURED)
    expected = [
        r"docs/launch.md:2: usage of `tfdist launch` lacks .*--priority.*--detach.*--state-dir.*--slurm.*--coordinator",
        r"docs/launch.md:6: `.*python train.py --epochs 3`: train.py is not a script of the repository",
        r"docs/launch.md:7: `.*`: examples/digits/train.py has no --epochs",
        r"docs/launch.md:8: `tfdist logs ID --follw`: .*unrecognized arguments: --follw",
        r"docs/launch.md:8: `tfdist metrics ID --cvs`: .*unrecognized arguments: --cvs",
        r"docs/launch.md:9: `make dmeo`: the Makefile has no target dmeo",
        r"docs/launch.md:12: `python benchmarks/nothing_here.py`: .* does not exist",
        r"docs/launch.md:12: `tfdist coordinator --subnett CIDR`: .*unrecognized arguments: --subnett",
        r"docs/launch.md:12: `benchmarks/nothing_here.py` does not exist",
        r"docs/launch.md:12: `examples/digit` does not exist",
        r"docs/launch.md:16: this YAML block is marked <!-- invalid --> but the config loader accepts it",
        r"docs/launch.md:20 \(a YAML block\): .*searcher",
        r"docs/launch.md:23: calls something 'roadmap'",
        r"docs/launch.md:25: says 'SIGTERM to `tfdist launch`\*\*: cancels': not so",
        r"docs/launch.md:25: says 'refused before any worker starts': not so",
    ]
    for pattern in expected:
        assert any(re.search(pattern, p) for p in found), f"not found: {pattern}\nfound:\n" + "\n".join(found)
    assert len(found) == len(expected), "\n".join(found)


def test_the_checker_catches_a_worker_api_that_is_not_there():
    text = """Use `tfdist.callbacks.Checkpoint(save_freqq=1)`, `ctx.rnak`, `tfdist.reprot_metrics(1)`, `tfdist.v1`.

```python
from tfdist.callbacks import Chekpoint
ctx = tfdist.init(default_hparams={})
model.fit(
```
"""
    found = [p for snippet in docs.snippets_of("docs/x.md", text) for p in doc_api.api_problems(snippet)]
    assert found == [
        "docs/x.md:6: this python block does not parse: '(' was never closed",
        "docs/x.md:1: `tfdist.callbacks.Checkpoint(...)` has no parameter 'save_freqq' (it takes directory, "
        "max_to_keep, save_freq)",
        "docs/x.md:1: `ctx.rnak`: DistributedContext (tfdist/context.py) has no such attribute",
        "docs/x.md:1: `tfdist.reprot_metrics`: no such name in tfdist's source",
    ], found
