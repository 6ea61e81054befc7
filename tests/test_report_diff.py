"""What changed between two builds, from their manifests' summaries (no cooking: fast)."""

from __future__ import annotations

from pipeline.report.model import changes


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
