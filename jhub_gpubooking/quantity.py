"""Kubernetes resource quantities ("500m", "16Gi", "1e3") as exact ``Decimal`` numbers.

The official ``kubernetes`` package has a ``parse_quantity``, but it is a 126 MB dependency the hub
image does not carry (KubeSpawner brings ``kubernetes_asyncio``, which has none). This follows
the grammar of Kubernetes' apimachinery ``resource.Quantity`` and is strict about it: a webhook
must not accept what the API server would read differently.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["parse_quantity"]

#: <signedNumber><suffix>, where the suffix is binary SI, decimal SI or a decimal exponent
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<exponent>[eE][+-]?\d+)|(?P<decimal>[numkMGTPE]?))"
)
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def parse_quantity(quantity: object) -> Decimal:
    """The value of a quantity: a string in Kubernetes' form, or an int, float or Decimal (the
    JSON numbers KubeSpawner sends). Raises ``ValueError`` for a malformed one, ``TypeError``
    for any other type."""
    if isinstance(quantity, bool):
        raise TypeError(f"{quantity!r} is not a quantity")
    if isinstance(quantity, (int, float, Decimal)):
        value = Decimal(quantity)
        if not value.is_finite():
            raise ValueError(f"{quantity!r} is not a quantity")
        return value
    if not isinstance(quantity, str):
        raise TypeError(f"{quantity!r} is not a quantity")
    match = _QUANTITY.fullmatch(quantity)
    if match is None:
        raise ValueError(f"{quantity!r} is not a quantity")
    number = Decimal(match["number"])
    if match["binary"]:
        return number * (2 ** _BINARY_SI[match["binary"]])
    if match["exponent"]:
        try:
            return number.scaleb(int(match["exponent"][1:]))
        except InvalidOperation:  # an exponent beyond Decimal's range
            raise ValueError(f"{quantity!r} is not a quantity") from None
    return number.scaleb(_DECIMAL_SI[match["decimal"]])
