"""What changed between two builds, from their manifests' summaries (no cooking: fast)."""

from __future__ import annotations

from onnx_cooker.report.model import changes


def model(
    size: int, key: str, *, sources: str = "s", settings: str = "a", error: float | None = 1e-6
) -> dict:
    return {
        "blob_size": size,
        "cook_key": key,
        "sources": {"m.onnx": sources},
        "settings": {"x": settings},
        "cooked_with": {"onnx": "1"},
        "max_abs": error,
    }


def test_added_removed_and_re_cooked_with_the_reason_and_the_accuracy_change() -> None:
    old = {"ios": {"kept": model(10, "k"), "gone": model(5, "g"), "tuned": model(8, "t1")}}
    new = {
        "ios": {
            "kept": model(10, "k"),
            "new": model(7, "n"),
            "tuned": model(4, "t2", settings="b", error=0.02),
        },
        "android": {"kept": model(9, "k2")},
    }
    found = {(c.platform, c.name): c for c in changes(old, new)}
    assert set(found) == {("ios", "gone"), ("ios", "new"), ("ios", "tuned"), ("android", "kept")}
    assert found["ios", "gone"].kind == "removed" and found["ios", "gone"].new_size == 0
    assert found["ios", "new"].kind == "added" and found["android", "kept"].kind == "added"
    tuned = found["ios", "tuned"]
    assert (tuned.kind, tuned.why, tuned.new_size - tuned.old_size) == ("re-cooked", "settings", -4)
    assert tuned.accuracy == "max abs error 1e-06 -> 0.02"
    assert found["ios", "gone"].accuracy == ""


def test_a_key_change_with_the_same_inputs_is_the_cookers_own() -> None:
    (change,) = changes({"p": {"m": model(1, "a")}}, {"p": {"m": model(1, "b")}})
    assert change.why == "the cooker's bundle format"


def test_settings_a_newer_cooker_added_are_its_own_change_not_the_users() -> None:
    """After an upgrade every model was 're-cooked: settings': the newer cooker resolves settings it
    added (defaults the older manifests lack). Keys only one side has are the cooker's; a value
    changed on a key both have is still the user's."""
    old = model(1, "a")
    upgraded = {**model(1, "b"), "settings": {"x": "a", "narrow_weights": True}}
    (change,) = changes({"p": {"m": old}}, {"p": {"m": upgraded}})
    assert change.why == "the cooker's bundle format"
    tuned = {**model(1, "c"), "settings": {"x": "b", "narrow_weights": True}}
    (change,) = changes({"p": {"m": old}}, {"p": {"m": tuned}})
    assert change.why == "settings"
    grown = {**model(1, "d"), "sources": {"m.onnx": "s", "m.onnx.data": "t"}}
    (change,) = changes({"p": {"m": old}}, {"p": {"m": grown}})
    assert change.why == "source"  # a source file added is a change of the sources
