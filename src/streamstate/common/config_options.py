"""``ConfigOption`` and ``ConfigOptions``, as ``pyflink.common.config_options``.

``ConfigOptions.key("execution.epoch.max-records").int_type().default_value(1000)`` builds
a typed option; ``Configuration.get(option)`` / ``set(option, value)`` read and write it
(the value parsed as the option's type, its default when unset).
"""

from __future__ import annotations

from typing import Any

from streamstate.errors import ConfigurationError

__all__ = ["ConfigOption", "ConfigOptions"]

_NO_DEFAULT = object()


class ConfigOption:
    """A configuration key with its type and default value."""

    def __init__(
        self,
        j_config_option: Any = None,
        *,
        value_type: type | None = None,
        default: Any = _NO_DEFAULT,
        description: str = "",
    ) -> None:
        if not isinstance(j_config_option, str) or not j_config_option:
            raise ConfigurationError(
                f"a ConfigOption needs a key, got {j_config_option!r}: use ConfigOptions.key('...')"
            )
        self._key = j_config_option
        self._type = value_type
        self._default = default
        self._description = description

    def key(self) -> str:
        return self._key

    def value_type(self) -> type | None:
        return self._type

    def has_default_value(self) -> bool:
        return self._default is not _NO_DEFAULT

    def default_value(self) -> Any:
        return None if self._default is _NO_DEFAULT else self._default

    def description(self) -> str:
        return self._description

    def with_description(self, description: str) -> ConfigOption:
        return ConfigOption(
            self._key, value_type=self._type, default=self._default, description=description
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigOption) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"ConfigOption({self._key!r}, default={self.default_value()!r})"


class ConfigOptions:
    """Builds :class:`ConfigOption` s: ``ConfigOptions.key(k).<type>().default_value(v)``."""

    def __init__(self, j_config_options: Any = None) -> None:
        self._j = j_config_options

    @staticmethod
    def key(key: str) -> ConfigOptions.OptionBuilder:
        return ConfigOptions.OptionBuilder(key)

    class OptionBuilder:
        def __init__(self, key: str) -> None:
            self._key = key

        def _typed(self, t: type) -> ConfigOptions.TypedConfigOptionBuilder:
            return ConfigOptions.TypedConfigOptionBuilder(self._key, t)

        def boolean_type(self) -> ConfigOptions.TypedConfigOptionBuilder:
            return self._typed(bool)

        def int_type(self) -> ConfigOptions.TypedConfigOptionBuilder:
            return self._typed(int)

        def long_type(self) -> ConfigOptions.TypedConfigOptionBuilder:
            return self._typed(int)

        def float_type(self) -> ConfigOptions.TypedConfigOptionBuilder:
            return self._typed(float)

        def double_type(self) -> ConfigOptions.TypedConfigOptionBuilder:
            return self._typed(float)

        def string_type(self) -> ConfigOptions.TypedConfigOptionBuilder:
            return self._typed(str)

    class TypedConfigOptionBuilder:
        def __init__(self, key: str, value_type: type) -> None:
            self._key = key
            self._type = value_type

        def default_value(self, value: Any) -> ConfigOption:
            if value is not None and not isinstance(value, self._type):
                raise ConfigurationError(
                    f"default of {self._key!r} must be a {self._type.__name__}, got {value!r}"
                )
            return ConfigOption(self._key, value_type=self._type, default=value)

        def no_default_value(self) -> ConfigOption:
            return ConfigOption(self._key, value_type=self._type)
