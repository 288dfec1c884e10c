"""tripwire's public face: a short `__all__`, every name resolves, and `import tripwire` starts no torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import tripwire

PROBE = """
import json, sys
import tripwire
before = "torch" in sys.modules
names = {name: type(getattr(tripwire, name)).__name__ for name in tripwire.__all__}
print(json.dumps({"torch_before": before, "names": names}))
"""


def test_every_public_name_resolves_and_import_tripwire_loads_no_torch() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    result = json.loads(done.stdout)
    assert result["torch_before"] is False
    assert set(result["names"]) == set(tripwire.__all__)


def test_the_public_surface_is_about_twenty_sorted_names() -> None:
    assert 10 <= len(tripwire.__all__) <= 24
    assert tripwire.__all__ == sorted(tripwire.__all__, key=lambda n: (not n[0].isupper(), n))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        tripwire.DoesNotExist  # noqa: B018
    except AttributeError as error:
        assert "has no attribute 'DoesNotExist'" in str(error)
    else:
        raise AssertionError("tripwire.DoesNotExist resolved")


IMPORT = re.compile(r"^\s*(?:from\s+(tripwire[\w.]*)\s+import|import\s+(tripwire[\w.]*))", re.MULTILINE)


def _imported_tripwire_modules(text: str) -> set[str]:
    return {match.group(1) or match.group(2) for match in IMPORT.finditer(text)}


def test_what_users_read_imports_public_modules_only() -> None:
    """The private line, held as pytest holds `_pytest`: the docs, the examples, the scenario files users copy and
    our own trainer (a user of tripwire) import only `tripwire.PUBLIC_MODULES`."""
    root = Path(__file__).resolve().parents[2]
    read = [*root.glob("*.md"), *root.glob("docs/*.md"), root / "src" / "tripwire" / "README.md"]
    read += [*root.glob("examples/**/*.py"), *root.glob("tests/tripwire/loops/*.py"), *root.glob("src/esper/**/*.py")]
    internal = {
        f"{path.relative_to(root)}: {module}"
        for path in read
        for module in _imported_tripwire_modules(path.read_text(encoding="utf-8"))
        if module not in tripwire.PUBLIC_MODULES
    }
    assert internal == set()


def test_the_private_line_check_sees_an_internal_import() -> None:
    text = "from tripwire import Result\nimport tripwire.sync.hooks\n    from tripwire.outside.record import record\n"
    assert _imported_tripwire_modules(text) == {"tripwire", "tripwire.sync.hooks", "tripwire.outside.record"}
