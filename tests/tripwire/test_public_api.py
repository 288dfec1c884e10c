"""tripwire's public face: a short `__all__`, every name resolves, and `import tripwire` starts no torch."""

from __future__ import annotations

import json
import subprocess
import sys

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
