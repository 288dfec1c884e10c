"""Every Python int is digested exactly, whatever its size: esper-lite's `rng_seed`, an unsigned 64-bit integer
from 71ec0b31 on, raised `Overflow when unpacking long long` in `leaf_value`, and crashed every commit of its
history walk."""

from __future__ import annotations

from tripwire.bitwise.digest import leaf_digest, leaf_record, leaf_value, value_digest


def test_an_unsigned_64_bit_int_is_digested_and_has_no_kept_value() -> None:
    seed = 2**63 + 12345
    assert leaf_value(seed) is None
    digest, spec, value = leaf_record(seed, keep=True)
    assert (spec, value) == ("int", None) and digest == leaf_digest(seed)
    assert value_digest(seed) != value_digest(seed + 1)


def test_an_int_of_more_digits_than_python_prints_is_digested_exactly() -> None:
    huge = 10**5000
    assert value_digest(huge) != value_digest(huge + 1)


def test_an_int64_keeps_its_value_and_its_old_digest() -> None:
    assert int(leaf_value(2**63 - 1)) == 2**63 - 1  # type: ignore[arg-type]
    assert value_digest(5) == value_digest(5) and leaf_record(5, keep=True)[1] == "int"
