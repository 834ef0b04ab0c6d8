"""A lab's own GPU backends: registered, named in config (a function or its import path), and
their output checked before it reaches a pod."""

from __future__ import annotations

from fractions import Fraction

import pytest
from test_gpu import CUSTOM

from jhub_gpubooking import gpu
from jhub_gpubooking.core.model import Placement
from jhub_gpubooking.gpu import BACKENDS, GpuRequest, gpu_request, register_backend, resolve_backends

ON_N = Placement(node="n", gpus=(0,), slices=1)

def fixed_backend(pool, amount, placement):
    """A lab's own translation: one device of a custom plugin, labelled with the slices."""
    return GpuRequest(
        {"example.org/gpu": 1},
        annotations={"example.org/slices": str(placement.slices)},
        env={"EXAMPLE_SHARE": str(amount)},
    )



def test_register_backend_adds_to_the_table(monkeypatch):
    monkeypatch.setattr(gpu, "BACKENDS", dict(BACKENDS))
    register_backend("lab", fixed_backend)
    assert gpu_request(CUSTOM, Fraction(1, 2), ON_N) == GpuRequest(
        {"example.org/gpu": 1},
        annotations={"example.org/slices": "1"},
        env={"EXAMPLE_SHARE": "1/2"},
    )


@pytest.mark.parametrize("name, func", [("", fixed_backend), ("lab", "not callable")])
def test_register_backend_refuses_nonsense(name, func):
    with pytest.raises(ValueError):
        register_backend(name, func)


def test_backend_by_callable_in_config():
    request = gpu_request(CUSTOM, Fraction(1), Placement(node="n", gpus=(0,), slices=2), {"lab": fixed_backend})
    assert request.resources == {"example.org/gpu": 1}
    assert "lab" not in BACKENDS


@pytest.fixture
def lab_package(tmp_path, monkeypatch):
    """A real importable module, as an admin would ship next to jupyterhub_config.py."""
    package = tmp_path / "lab_gpu_backends"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sharing.py").write_text(
        "from jhub_gpubooking.gpu import GpuRequest\n"
        "def quarters(pool, amount, placement):\n"
        "    return GpuRequest({'example.org/quarter-gpu': int(amount * 4)})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "lab_gpu_backends.sharing:quarters"


def test_backend_by_import_string(lab_package):
    assert resolve_backends({"lab": lab_package})["lab"].__name__ == "quarters"
    request = gpu_request(CUSTOM, Fraction(1, 2), ON_N, {"lab": lab_package})
    assert request == GpuRequest({"example.org/quarter-gpu": 2})


@pytest.mark.parametrize(
    "target, message",
    [
        ("lab_gpu_backends_missing.sharing:quarters", "cannot import"),
        ("jhub_gpubooking.gpu:no_such_function", "cannot import"),
        ("jhub_gpubooking.gpu:LABEL_PREFIX", "must be a function"),
        (42, "must be a function"),
    ],
)
def test_bad_backend_config_is_refused(target, message):
    with pytest.raises(ValueError, match=message):
        resolve_backends({"lab": target})


@pytest.mark.parametrize(
    "output, message",
    [
        ({"example.org/gpu": 0}, "whole numbers greater than zero"),
        ({"example.org/gpu": 0.5}, "whole numbers greater than zero"),
        ({"example.org/gpu": True}, "whole numbers greater than zero"),
        ({"example.org/gpu": "1"}, "whole numbers greater than zero"),
        ({"gpu": 1}, "not an extended resource name"),
        ({}, "requested no resource"),
    ],
)
def test_backend_output_is_validated(output, message):
    def backend(pool, amount, placement):
        return GpuRequest(output)

    with pytest.raises(ValueError, match=message):
        gpu_request(CUSTOM, Fraction(1), None, {"lab": backend})


@pytest.mark.parametrize(
    "output, message",
    [
        ({"example.org/gpu": 1}, "must return a GpuRequest"),
        (GpuRequest({"example.org/gpu": 1}, annotations={"a": 1}), "text keys and text values"),
        (GpuRequest({"example.org/gpu": 1}, env={"A": None}), "text keys and text values"),
        (GpuRequest({"example.org/gpu": 1}, env=None), "text keys and text values"),
        (GpuRequest(None), "requested no resource"),
        (GpuRequest({"example.org/gpu": 1}, scheduler_name=""), "scheduler name"),
    ],
)
def test_backend_output_shape_is_validated(output, message):
    with pytest.raises(ValueError, match=message):
        gpu_request(CUSTOM, Fraction(1), None, {"lab": lambda pool, amount, placement: output})
