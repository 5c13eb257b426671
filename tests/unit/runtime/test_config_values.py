"""runtime/config_values.py: every reader returns the default when the key is unset and
names the full key and what it must be when the value is bad."""

from __future__ import annotations

import pytest

from streamstate.common import Configuration
from streamstate.errors import ConfigurationError
from streamstate.runtime.config_values import (
    conf_bool,
    conf_duration_ms,
    conf_fraction,
    conf_int,
    conf_positive_float,
    conf_str,
)

KEY = "some.section.key"


def _conf(value: str | None) -> Configuration:
    conf = Configuration()
    if value is not None:
        conf.set_string(KEY, value)
    return conf


@pytest.mark.parametrize(
    ("read", "raw", "expected"),
    [
        (lambda c: conf_bool(c, KEY, default=True), None, True),
        (lambda c: conf_bool(c, KEY), " TRUE ", True),
        (lambda c: conf_int(c, KEY, 7), None, 7),
        (lambda c: conf_int(c, KEY, 7, minimum=0), "0", 0),
        (lambda c: conf_positive_float(c, KEY, 2.5), "0.25", 0.25),
        (lambda c: conf_fraction(c, KEY, 0.5), "1", 1.0),
        (lambda c: conf_duration_ms(c, KEY, 5), "2 s", 2000),
        (lambda c: conf_duration_ms(c, KEY, 5), None, 5),
        (lambda c: conf_str(c, "unset.key", KEY), " x ", "x"),
        (lambda c: conf_str(c, KEY), "   ", None),
    ],
)
def test_values_and_defaults(read, raw, expected):
    assert read(_conf(raw)) == expected


def test_none_reads_as_an_empty_configuration():
    assert conf_int(None, KEY, 3) == 3 and conf_bool(None, KEY) is False


@pytest.mark.parametrize(
    ("read", "raw", "message"),
    [
        (lambda c: conf_bool(c, KEY), "yes", "must be true or false"),
        (lambda c: conf_int(c, KEY, 1), "1.5", "must be an integer"),
        (lambda c: conf_int(c, KEY, 1, minimum=1), "0", "must be >= 1"),
        (lambda c: conf_positive_float(c, KEY, 1.0), "-1", "must be > 0"),
        (lambda c: conf_positive_float(c, KEY, 1.0), "lots", "must be a number"),
        (lambda c: conf_fraction(c, KEY, 0.5), "1.5", r"must be in \(0, 1\]"),
        (lambda c: conf_duration_ms(c, KEY, 0), "soon", "must be a duration"),
    ],
)
def test_a_bad_value_names_the_full_key(read, raw, message):
    with pytest.raises(ConfigurationError, match=message) as e:
        read(_conf(raw))
    assert str(e.value).startswith(KEY)
