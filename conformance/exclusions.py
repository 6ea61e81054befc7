"""The exclusion list: (case, platforms) pairs the gate accepts failing, each with its reason."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

EXCLUSIONS_PATH = Path(__file__).with_name("exclusions.yaml")
ALL = "all"
_KEYS = {"case", "platforms", "reason"}


@dataclass(frozen=True, kw_only=True)
class Exclusion:
    case: str
    platforms: tuple[str, ...]  # or (ALL,)
    reason: str

    def covers(self, platform: str) -> bool:
        return ALL in self.platforms or platform in self.platforms


def load_exclusions(path: Path, platform_names: Collection[str]) -> dict[str, Exclusion]:
    """Exclusions by case name; every problem of the file is reported at once."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    problems: list[str] = []
    found: dict[str, Exclusion] = {}
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of {{case, platforms, reason}} entries")
    for index, entry in enumerate(data):
        where = f"{path}: entry {index + 1}"
        if not isinstance(entry, Mapping) or set(entry) != _KEYS:
            problems.append(f"{where}: needs exactly the keys case, platforms, reason; got {entry!r}")
            continue
        platforms = entry["platforms"]
        platforms = [platforms] if isinstance(platforms, str) else platforms
        unknown = sorted(set(platforms) - set(platform_names) - {ALL})
        if unknown:
            problems.append(f"{where} ({entry['case']}): unknown platform(s) {unknown}")
        if not str(entry["reason"]).strip():
            problems.append(f"{where} ({entry['case']}): the reason is empty; say why the case may fail")
        if entry["case"] in found:
            problems.append(f"{where}: {entry['case']} is listed twice; merge the entries")
        found[entry["case"]] = Exclusion(
            case=entry["case"], platforms=tuple(platforms), reason=" ".join(str(entry["reason"]).split())
        )
    if problems:
        raise ValueError("\n".join(problems))
    return found
