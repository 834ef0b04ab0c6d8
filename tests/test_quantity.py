"""jhub_gpubooking.quantity reads Kubernetes quantities as the API server does; for every quantity
of Kubernetes' grammar it agrees with the official client's ``parse_quantity`` (a test-only
dependency here)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as official_parse_quantity

from jhub_gpubooking.quantity import parse_quantity


@pytest.mark.parametrize(("text", "value"), [
    ("1", Decimal(1)),
    ("500m", Decimal("0.5")),
    ("16Gi", Decimal(16 * 2**30)),
    ("1.5k", Decimal(1500)),
    ("+2", Decimal(2)),
    ("-3M", Decimal(-3_000_000)),
    (".5", Decimal("0.5")),
    ("5.", Decimal(5)),
    ("1e3", Decimal(1000)),
    ("2E-2", Decimal("0.02")),
    ("2E", Decimal(2 * 10**18)),  # a lone E is the exa suffix
    ("100n", Decimal("1E-7")),
    ("4Ki", Decimal(4096)),
])
def test_kubernetes_forms(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("number", [2, 0.5, Decimal("1.25"), 4294967296])
def test_json_numbers_pass_through(number):
    assert parse_quantity(number) == Decimal(number)


@pytest.mark.parametrize("bad", [
    "", "Gi", "1 Gi", " 1", "1ki", "1mi", "1e", "1.2.3", "NaN", "Infinity", "1_000", "0x10",
    "1KiB", float("nan"), float("inf"),
])
def test_malformed_quantities_are_refused(bad):
    with pytest.raises(ValueError, match="is not a quantity"):
        parse_quantity(bad)


@pytest.mark.parametrize("bad", [True, None, [1], {"cpu": 1}])
def test_other_types_are_refused(bad):
    with pytest.raises(TypeError, match="is not a quantity"):
        parse_quantity(bad)


digits = st.text("0123456789", min_size=1, max_size=6)
numbers = st.one_of(
    digits, st.builds("{}.{}".format, digits, digits), st.builds("{}.".format, digits),
    st.builds(".{}".format, digits),
)
suffixes = st.one_of(
    st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "E",
                     "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]),
    st.builds("{}{}{}".format, st.sampled_from("eE"), st.sampled_from(["", "+", "-"]),
              st.integers(0, 30)),
)
quantities = st.builds("{}{}{}".format, st.sampled_from(["", "+", "-"]), numbers, suffixes)


@given(quantities)
def test_agrees_with_the_official_client(text):
    assert parse_quantity(text) == official_parse_quantity(text)
