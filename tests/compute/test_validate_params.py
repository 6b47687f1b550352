"""Declared parameter constraints: validate_params and its messages."""

from numbers import Integral, Real

import numpy as np
import pytest

from connscale._validation import (
    Interval,
    InvalidParameterError,
    StrOptions,
    validate_estimator_params,
    validate_params,
)


@validate_params(
    {
        "x": ["array-like"],
        "n": [Interval(Integral, 1, None, closed="left")],
        "r": [Interval(Real, -1, 1, closed="both"), None],
        "kind": [StrOptions({"a", "b"})],
        "memory_limit": ["memory", None],
        "device": ["device"],
        "random_state": ["random_state"],
        "flag": ["boolean"],
    }
)
def f(x, n=1, *, r=None, kind="a", memory_limit=None, device="auto", random_state=None, flag=False):
    return n


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n": 0}, "The 'n' parameter of f must be an int in the range [1, inf). Got 0 instead."),
        ({"n": True}, "must be an int in the range [1, inf). Got True instead."),
        ({"n": 2.0}, "must be an int in the range [1, inf). Got 2.0 instead."),
        (
            {"r": 1.5},
            "The 'r' parameter of f must be a float in the range [-1, 1] or None. Got 1.5 instead.",
        ),
        ({"r": float("nan")}, "'r' parameter of f must be a float in the range [-1, 1]"),
        (
            {"kind": "c"},
            "The 'kind' parameter of f must be a str among {'a', 'b'}. Got 'c' instead.",
        ),
        ({"memory_limit": "8XB"}, "'memory_limit' parameter of f must be a number of bytes"),
        ({"memory_limit": 0}, "'memory_limit' parameter of f must be a number of bytes"),
        ({"device": "tpu"}, "'device' parameter of f must be 'auto', 'cpu', 'cuda', 'cuda:N'"),
        (
            {"random_state": "seed"},
            "'random_state' parameter of f must be an int, a numpy "
            "Generator, a RandomState or None. Got 'seed' instead.",
        ),
        ({"flag": 1}, "The 'flag' parameter of f must be a bool. Got 1 instead."),
    ],
)
def test_invalid_parameter_names_expected_and_got(kwargs, message):
    with pytest.raises(InvalidParameterError) as info:
        f([1.0, 2.0], **kwargs)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_valid_parameters_pass():
    assert (
        f(
            np.zeros(3),
            np.int64(4),
            r=np.float32(0.5),
            kind="b",
            memory_limit="8GB",
            device="cuda:1",
            random_state=np.random.default_rng(0),
            flag=np.True_,
        )
        == 4
    )


def test_array_like_refuses_strings():
    with pytest.raises(InvalidParameterError, match="'x' parameter of f must be an array-like"):
        f("abc")


def test_nested_public_calls_validate_once():
    calls = []

    @validate_params({"n": [Interval(Integral, 1, None, closed="left")]})
    def inner(n):
        calls.append(n)
        return n

    @validate_params({"n": [Interval(Integral, 0, None, closed="left")]})
    def outer(n):
        return inner(n)

    # inner's own constraint is not re-checked inside outer...
    assert outer(0) == 0
    # ...but is at its own entry.
    with pytest.raises(InvalidParameterError, match="'n' parameter of "):
        inner(0)
    assert outer.parameter_constraints["n"][0].left == 0


def test_constraints_must_name_parameters():
    with pytest.raises(ValueError, match="name no parameter"):
        validate_params({"m": [None]})(lambda n: n)


def test_estimator_parameters():
    class Estimator:
        _parameter_constraints = {"n_components": [Interval(Integral, 1, None, closed="left")]}

        def __init__(self, n_components=2):
            self.n_components = n_components

    validate_estimator_params(Estimator())
    with pytest.raises(
        InvalidParameterError,
        match=r"The 'n_components' parameter of Estimator.fit must be an int "
        r"in the range \[1, inf\). Got 0 instead.",
    ):
        validate_estimator_params(Estimator(0))


def test_sequence_of_checks_every_item():
    from connscale._validation import SequenceOf

    fractions = SequenceOf(Interval(Real, 0, 1, closed="right"))
    assert fractions.is_satisfied_by([0.1, 1]) and fractions.is_satisfied_by(np.array([0.5]))
    for bad in ([], [0.1, 0.0], 0.5, "0.5", np.ones((2, 2)), [True], [0.1, None]):
        assert not fractions.is_satisfied_by(bad), bad
    assert str(fractions) == "a non-empty sequence, each a float in the range (0, 1]"
