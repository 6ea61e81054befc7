"""Strict YAML reading for settings files: size and encoding limits, no duplicate keys, no aliases.

Every problem is returned as a message naming the source (a file or an environment variable) and,
for YAML errors, the line and column. Imported while doit loads tasks: standard library and yaml only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_SETTINGS_FILE_BYTES = 1024 * 1024


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (plain PyYAML keeps the last one),
    and anchors/aliases: settings never need them, and nested aliases ("billion laughs") expand
    exponentially once the values are walked."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                "aliases (*name) are not allowed in settings files; write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in first_lines:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first given at line {first_lines[key] + 1}); give each key once",
                    key_node.start_mark,
                )
            first_lines[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


class LineMap(dict):
    """A mapping read from a settings file that remembers the line of each key (1-based), for
    problems that name where to look (``line_of``)."""

    lines: dict[Any, int]


def _construct_map(loader: StrictLoader, node: yaml.MappingNode) -> Any:
    data = LineMap()
    data.lines = {}
    yield data
    data.update(loader.construct_mapping(node))
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode):
            data.lines.setdefault(loader.construct_object(key_node), key_node.start_mark.line + 1)


StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)


def line_of(data: Any, key: Any) -> str:
    """`` (line N)`` where ``key`` was written in the settings file ``data`` was read from, else ``""``."""
    lines = getattr(data, "lines", None)
    return f" (line {lines[key]})" if isinstance(lines, dict) and key in lines else ""


def line_of_problem(data: Any, key: Any, problem: str) -> str:
    """``line_of`` the innermost key a problem names (``'provider_options.XnnpackExecutionProvider.
    model_cache_dir' cannot...``: the line of ``model_cache_dir``, not of ``provider_options``)."""
    found = line_of(data, key)
    named = problem[1 : problem.find("'", 1)] if problem.startswith("'") else ""
    node, rest = data.get(key) if isinstance(data, dict) else None, named[len(str(key)) :]
    if not named.startswith(str(key)):
        return found
    while rest.startswith(".") and isinstance(node, dict):
        rest = rest[1:]  # keys may hold dots themselves (session.intra_op.allow_spinning): the longest
        inner = max(
            (k for k in node if isinstance(k, str) and (rest + ".").startswith(k + ".")),
            key=len,
            default=None,
        )
        if inner is None:
            break
        found = line_of(node, inner) or found
        node, rest = node[inner], rest[len(inner) :]
    return found


def read_yaml(path: Path) -> tuple[Any, list[str]]:
    """Parse one settings file strictly; an empty file (or only comments) is an empty mapping."""
    source = str(path)
    try:
        with path.open("rb") as stream:
            # Read at most one byte past the limit: a huge file is refused without being read or parsed.
            raw = stream.read(MAX_SETTINGS_FILE_BYTES + 1)
    except OSError as exc:
        return None, [f"{source}: cannot read the file: {exc.strerror or exc}"]
    if len(raw) > MAX_SETTINGS_FILE_BYTES:
        return None, [
            f"{source}: file is larger than the 1 MiB limit for settings files; refusing to "
            "read it (is this really a settings file?)"
        ]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [
            f"{source}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8"
        ]
    data, problems = parse_yaml(text, source)
    return ({} if data is None and not problems else data), problems


def parse_yaml(text: str, source: str) -> tuple[Any, list[str]]:
    """Parse YAML text strictly: the value, or None and one problem naming source and the position."""
    try:
        return yaml.load(text, Loader=StrictLoader), []
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        context = ""
        if exc.context:
            started = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
            context = f" ({exc.context}{started})"
        return None, [f"{source}: invalid YAML{where}: {exc.problem}{context}"]
    except yaml.YAMLError as exc:
        return None, [f"{source}: invalid YAML: {exc}"]
    except RecursionError:
        return None, [f"{source}: invalid YAML: nested too deeply"]
    except ValueError as exc:  # from PyYAML's constructors: a 5000-digit integer, a date like 2024-13-45
        return None, [f"{source}: invalid YAML: a value cannot be read ({exc})"]
