"""``onnx-cooker``: cook a project's models and look at what was cooked, from any folder of it.

    onnx-cooker init                      # a cook.toml and the shipped platform profiles, here
    onnx-cooker cook [doit options] [TASK ...]
    onnx-cooker list | clean | info | help [doit options]
    onnx-cooker inspect PATH              # a bundle's models, or a blob's header
    onnx-cooker report [BUILD]            # (re)write BUILD/report.html
    onnx-cooker diff OLD_BUILD NEW_BUILD  # what changed between two builds
    onnx-cooker cache stats|prune ...     # a folder cook cache's housekeeping
    onnx-cooker keygen FOLDER             # an Ed25519 key pair for signed bundles

The doit commands run the same tasks as the repository's ``dodo.py`` (onnx_cooker/build/doitfile.py)
through doit's own ``DoitMain``, so doit's state, parallelism (``-n``) and incrementality are the
same.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnx_cooker.cli.pipes import Parser, Unread, flushed, output_failed, reader_left
from onnx_cooker.cli.project import ProjectError, find_project, load_project
from onnx_cooker.errors import CookError

PROG = "onnx-cooker"
DOIT_COMMANDS = ("cook", "list", "clean", "info", "help")
FOLDER_OPTIONS = {"assets": "COOK_ASSETS_DIR", "platforms": "COOK_PLATFORMS_DIR", "build": "COOK_BUILD_DIR"}

# What the cook reads from the environment (docs/cooking.md has the details).
ENVIRONMENT = """\
environment variables (each overrides the project file):
  COOK_ASSETS_DIR, COOK_PLATFORMS_DIR, COOK_BUILD_DIR
                        the folders (relative ones: to the working directory)
  COOK_RUNTIMES_DIR     where target onnxruntime environments for the runtime check are kept
  COOK_PIP_TIMEOUT      seconds pip may take to install one (default 300)
  COOK_SET_<KEY>=VALUE  override one setting for every platform (e.g. COOK_SET_COMPRESSION_LEVEL=3)
  COOK_ALLOCATOR        retain (default) or system: how cooking processes keep freed memory
  COOK_CACHE, COOK_CACHE_MODE, COOK_CACHE_REQUIRED
                        a shared cook cache (a folder or s3://bucket/prefix), read or readwrite
  COOK_SHARD=i/N        cook only this agent's share, into the cache
  COOK_SIGNING_KEY      sign every manifest with this Ed25519 key
  COOK_STRICT=1         fail instead of warning about ignored asset files
  COOK_ISOLATE=0        cook in doit's own process, not a forked child per model (a debugger)
"""

PROJECT_HELP = """\
project file: cook.toml, or [tool.onnx-cooker] in pyproject.toml, in the working directory or a
folder above it; keys assets, platforms, build (folders relative to the file). `onnx-cooker init`
writes one.
"""


class _Version(argparse.Action):
    """``--version``: the line is worked out only when asked for (package metadata costs every
    command's start a few milliseconds)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        sys.stdout.write(_versions_line() + "\n")
        parser.exit()


def _versions_line() -> str:
    """onnx-cooker's version and what else goes into every cook key (a build agent's check)."""
    from importlib import metadata

    from onnx_cooker.cook.key import BUNDLE_FORMAT, tool_versions

    try:
        own = metadata.version("onnx-cooker")
    except metadata.PackageNotFoundError:  # a checkout on the path, not installed
        own = "(not installed)"
    tools = ", ".join(f"{name} {version}" for name, version in tool_versions().items())
    return f"{PROG} {own} (bundle format {BUNDLE_FORMAT}; {tools})"


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Cook ONNX models into verified per-platform bundles, and inspect them.",
        epilog=PROJECT_HELP + "\n" + ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, help="the versions every cook key holds, and exit")
    parser.add_argument(
        "--project", type=Path, help="the project file (or its folder); default: found from here upward"
    )
    for key, variable in FOLDER_OPTIONS.items():
        parser.add_argument(
            f"--{key}",
            dest=f"folder_{key}",
            type=Path,
            metavar="PATH",
            help=f"overrides the file and {variable}",
        )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    raw = argparse.RawDescriptionHelpFormatter
    init = commands.add_parser(
        "init", help="write a cook.toml and the shipped platform profiles here", formatter_class=raw
    )
    init.add_argument("folder", nargs="?", type=Path, default=Path("."), help="default: here")
    init.add_argument("--assets", default="assets", help="the assets folder to name (default: assets)")
    doit_help = {
        "cook": "cook every model for every platform (doit's `run`; TASK: cook:android, 'cook:*:mnist')",
        "list": "list the cook tasks (doit's `list`; --all for every sub-task)",
        "clean": "remove what the cook wrote (doit's `clean`)",
        "info": "a task's state (doit's `info TASK`)",
        "help": "doit's help on its commands and options (`help run`)",
    }
    for name in DOIT_COMMANDS:
        sub = commands.add_parser(
            name,
            help=doit_help[name],
            description=doit_help[name] + ". Options after the command go to doit.",
            epilog=ENVIRONMENT,
            formatter_class=raw,
            add_help=False,
        )
        sub.add_argument("-h", "--help", action="store_true", help="this help and doit's options")
        sub.add_argument("doit_args", nargs="*", metavar="DOIT_ARG", help="doit's options and task names")
    inspect = commands.add_parser("inspect", help="print a bundle's models or a blob's header")
    inspect.add_argument("path", type=Path, help="a bundle folder, its manifest.json, or a .ocb blob")
    report = commands.add_parser("report", help="(re)write BUILD/report.html")
    report.add_argument("build", nargs="?", type=Path, help="default: the project's build folder")
    diff = commands.add_parser("diff", help="what changed between two builds (bundle sizes, models)")
    diff.add_argument("args", nargs=argparse.REMAINDER, help="OLD_BUILD NEW_BUILD [--html FILE] ...")
    cache = commands.add_parser("cache", help="a folder cook cache's housekeeping: stats, prune")
    cache.add_argument("args", nargs=argparse.REMAINDER, help="stats|prune [options] (see `cache --help`)")
    keygen = commands.add_parser("keygen", help="write an Ed25519 signing key pair into FOLDER")
    keygen.add_argument("folder", type=Path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # `onnx-cooker list --all | head`: the reader left, which is no error
        return reader_left()  # quietly, 141 (pipes.py)
    except KeyboardInterrupt:  # Ctrl-C: one line, not the traceback of whatever was waiting
        print(
            f"\n{PROG}: interrupted; nothing half-written was published: run the same command again to "
            "finish (what completed is not redone)",
            file=sys.stderr,
        )
        return 130
    return flushed(code)  # what init, keygen... printed may still be in stdout's buffer


def _leading_options(argv: list[str]) -> int:
    """How many of ``argv``'s first words are ``onnx-cooker``'s own options (before the command)."""
    at, names = 0, ("--project", *(f"--{key}" for key in FOLDER_OPTIONS))
    while at < len(argv):
        if argv[at] in names:
            at += 2
        elif argv[at].startswith(tuple(f"{name}=" for name in names)):
            at += 1
        else:
            break
    return at


def _main(argv: list[str]) -> int:
    # doit's commands take doit's options, which argparse would not pass through: split them off.
    at = _leading_options(argv)
    if len(argv) > at and argv[at] in PASSED_THROUGH:  # their own command lines, --help included
        return PASSED_THROUGH[argv[at]](argv[at + 1 :])
    if len(argv) > at and argv[at] in DOIT_COMMANDS:
        rest = argv[at + 1 :]
        help_asked = any(a in ("-h", "--help") for a in rest)
        ours = _parser().parse_args([*argv[:at], argv[at], *(["--help"] if help_asked else [])])
        ours.doit_args = [a for a in rest if a not in ("-h", "--help")]
        args = ours
    else:
        args = _parser().parse_args(argv)
    try:
        if args.command == "init":
            from onnx_cooker.cli.init import init

            print(init(args.folder.resolve(), assets=args.assets))
            return 0
        if args.command in DOIT_COMMANDS:
            return _doit(args)
        if args.command == "inspect":
            from onnx_cooker.runtime.__main__ import main as runtime_main

            return runtime_main(["inspect", str(args.path)])
        if args.command == "report":
            from onnx_cooker.report.cli import main as report_main

            build = args.build or args.folder_build or _project(args).folders["build"]
            return report_main([str(build)], prog=f"{PROG} report")
        if args.command == "keygen":
            from onnx_cooker.build.signing import main as signing_main

            return signing_main(["keygen", str(args.folder)])
    except BrokenPipeError:  # the reader of our output left: main's to handle, not an error
        raise
    except (CookError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(args.command)  # argparse allows no other command


def _cache(argv: list[str]) -> int:
    from onnx_cooker.farm.admin import main as cache_main

    return cache_main(argv, prog=f"{PROG} cache")


def _diff(argv: list[str]) -> int:
    from onnx_cooker.report.cli import main as report_main

    return report_main(["diff", *argv], prog=f"{PROG} diff")


PASSED_THROUGH = {"cache": _cache, "diff": _diff}


def _project(args: argparse.Namespace):  # -> Project
    cwd = Path.cwd()
    return load_project(args.project.resolve()) if args.project else find_project(cwd)


def _doit(args: argparse.Namespace) -> int:
    from doit.cmd_base import ModuleTaskLoader
    from doit.doit_cmd import DoitMain

    from onnx_cooker.build.doitfile import cook_namespace

    rest = list(args.doit_args)
    if args.help:
        print(_parser_help(args.command))
        rest = [args.command if args.command != "cook" else "run"]
        command = "help"
    else:
        command = "run" if args.command == "cook" else args.command
        if args.command == "cook" and not any(not a.startswith("-") for a in rest):
            rest.append("cook")  # no task named: every cook task (doit's default task)
    try:
        project = _project(args)
    except ProjectError:
        if command == "help":  # doit's help needs no project
            return _listing(DoitMain(ModuleTaskLoader({})), ["help", *rest], args)
        raise
    env = project.environment(os.environ, Path.cwd())
    for key, variable in FOLDER_OPTIONS.items():  # the command line wins over both
        given = getattr(args, f"folder_{key}")
        if given is not None:
            env[variable] = str(given.resolve())
    os.environ.update(env)  # doit's worker processes (-n) inherit what the tasks were loaded with
    loader = ModuleTaskLoader(cook_namespace(project.root, env))
    if command in ("run", "info"):  # info of a name doit does not know is a KeyError traceback
        if unmatched := _unmatched_patterns(rest, env, project.root, every_name=command == "info"):
            print(f"{PROG}: error: {unmatched}", file=sys.stderr)
            return 2
    if command == "run":  # doit's reporter writes to the `outfile` option's stream (stdout's)
        out = Unread(sys.stdout)
        with contextlib.redirect_stdout(out):  # and the planning's own lines to sys.stdout
            code = DoitMain(loader, config_filenames=(), extra_config={"run": {"outfile": out}}).run(
                [command, *rest]
            )
        return output_failed(out.error, code) if out.error else code
    return _listing(DoitMain(loader, config_filenames=()), [command, *rest], args)


def _listing(doit: Any, words: list[str], args: argparse.Namespace) -> int:
    """doit's ``list``, ``info``, ``clean`` or ``help``, through a buffer: doit catches a closed pipe
    itself and prints a traceback."""
    listing = io.StringIO()
    with contextlib.redirect_stdout(listing):
        code = doit.run(words)
    text = listing.getvalue()
    if args.help and args.command == "cook":  # doit's help of `run`, as this command runs it
        text = re.sub(r"\S+ run \[TASK", f"{PROG} cook [TASK", text)  # doit names argv[0]
        text = re.sub(r"(even after a failure \[default:\s+)False\]", r"\1True in a cook]", text)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # what doit did (`clean`) is done: only its listing went unread
        return reader_left(code)
    return code


def _unmatched_patterns(
    words: list[str], env: dict[str, str], root: Path, every_name: bool = False
) -> str | None:
    """Why a task pattern with ``*`` (``"cook:*:mnst"``) matches no cook task, else None: doit runs
    nothing for it and exits 0, so a typo would pass for a cook. Names without ``*`` are doit's to
    check ("Invalid parameter"), unless ``every_name`` (``info``, where doit has no check)."""
    import fnmatch
    import itertools

    from onnx_cooker.build.tasks import cook_tasks

    # and exact task names (`cook:handhled`: doit's "Invalid parameter" suggests nothing); a word
    # that names a file is a target of doit's own
    patterns = [
        word
        for word in words
        if ("*" in word or ":" in word or every_name) and not word.startswith("-") and not Path(word).exists()
    ]
    if not patterns:
        return None
    try:  # the cook's own planning reports a project it cannot plan (and its warnings), in the run
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            tasks = list(cook_tasks(env, root))
        names = {"cook", *(f"{t.get('basename', 'cook')}:{t['name']}" for t in tasks if t.get("name"))}
        names |= {t["basename"] for t in tasks if t.get("basename")}
        names = sorted(names)
    except Exception:  # noqa: BLE001 - said again, properly, by the run that follows
        return None
    for pattern in patterns:
        if not fnmatch.filter(names, pattern):
            # each part without * replaced by the names it may mean in that place (cook:*:mnst ->
            # cook:*:mnist; cook:*:face -> cook:*:characters/face, a model named by its file name)
            parts = pattern.split(":")
            known = [
                {name.split(":")[i] for name in names if name.count(":") == len(parts) - 1}
                for i in range(len(parts))
            ]
            choices = [
                [part] if "*" in part or part in known[i] else _meant(part, known[i]) or [part]
                for i, part in enumerate(parts)
            ]
            near = [":".join(c) for c in itertools.product(*choices) if fnmatch.filter(names, ":".join(c))]
            shown = [repr(n) for n in near[:3]] + ([f"{len(near) - 3} more"] if len(near) > 3 else [])
            said = " or ".join([", ".join(shown[:-1]), shown[-1]] if len(shown) > 1 else shown)
            return (
                f"no cook task matches {pattern!r} (tasks are cook:<platform>:<model>; "
                f"`{PROG} list --all` lists them){f'; did you mean {said}?' if near else ''}"
            )
    return None


def _meant(part: str, known: set[str]) -> list[str]:
    """The names ``part`` of a task pattern may mean: those whose last path segment it names (a
    model named by its file name: ``mlp_003`` for ``vision/mlp_003``; never a near miss among
    others then), else those nearest to it or to its last segment (``difflib``'s ratio, at least
    0.6; ties all), whole names and last segments alike (``big_56mv``: ``world/streaming/big_56mb``)."""
    from difflib import SequenceMatcher

    last = part.rsplit("/", 1)[-1]
    same_file = sorted(name for name in known if name.rsplit("/", 1)[-1] == last)
    if same_file:
        return same_file
    scores: dict[str, float] = {}
    for name in known:
        for key in {name, name.rsplit("/", 1)[-1]}:
            score = max(SequenceMatcher(None, word, key).ratio() for word in {part, last})
            scores[name] = max(scores.get(name, 0.0), score)
    best = max(scores.values(), default=0.0)
    return sorted(name for name, score in scores.items() if score == best) if best >= 0.6 else []


def _parser_help(command: str) -> str:
    parser = _parser()
    for action in parser._subparsers._group_actions:  # noqa: SLF001 - argparse keeps them there
        choice = action.choices.get(command)
        if choice is not None:
            return choice.format_help()
    return parser.format_help()


if __name__ == "__main__":
    sys.exit(main())
