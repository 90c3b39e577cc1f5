"""Where each value of an `onyx` option comes from: the command line, an ``ONYX_<OPTION>``
environment variable, a TOML config file (``--config PATH`` or ``ONYX_CONFIG``), or the option's
default, in that order.

It is built over the argparse parser rather than option by option, so every option of every
command is configurable in the same way, and a value from the environment or a file goes through
the option's own type check, exactly as if it had been typed on the command line.

A config file holds keys named as the options (``connect_timeout = 3``, ``spark_conf = ["k=v"]``).
Top-level keys apply to every command that has the option (a shared file names ZooKeeper once for
all of them); a table named after a command (``[replica]``, ``[peer.start]``, ``[job.wait]``)
applies to that command only and overrides the level above it. A key that no command under its
table knows is refused, so a typo never passes silently.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONFIG_VARIABLE = "ONYX_CONFIG"
ENV_PREFIX = "ONYX_"
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
NOT_OPTIONS = frozenset({"help", "version", "config"})
FILE_LIMIT = 1024 * 1024
"""The largest config file read: option values, never data."""


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""The command line's value of an option it did not give (a list option's is None)."""


class ConfigError(ValueError):
    """A value from the environment or a config file that its option refuses, an unknown key, a
    file that cannot be read, or a required option given nowhere: an argument error (exit 2)."""


@dataclass(frozen=True)
class Setting:
    """One option's effective value; ``source`` is default, file, env, command line or unset
    (a required option given nowhere), ``origin`` names the variable, file key or flag."""

    option: str
    value: Any
    source: str
    origin: str


# -- the parser's shape ---------------------------------------------------------------------------


def commands(parser: argparse.ArgumentParser) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every runnable command, by its words (``("peer", "start")``), with its own parser."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    sub = _subcommands(parser)
    if sub is None:
        return {(): parser}
    for name, child in sub.choices.items():
        for words, leaf in commands(child).items():
            found[(name, *words)] = leaf
    return found


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The configurable options of one command: every flag but help, version and --config."""
    return [a for a in parser._actions if a.option_strings and a.dest not in NOT_OPTIONS]


def command_of(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[tuple[str, ...], argparse.ArgumentParser]:
    """The words and parser of the command that ``args`` were parsed for."""
    words: tuple[str, ...] = ()
    while (sub := _subcommands(parser)) is not None:
        name = getattr(args, sub.dest)
        words, parser = (*words, name), sub.choices[name]
    return words, parser


def env_name(action: argparse.Action) -> str:
    return ENV_PREFIX + action.dest.upper()


def _is_list(action: argparse.Action) -> bool:
    return isinstance(action, argparse._AppendAction)


def _joined(action: argparse.Action, values: list[Any]) -> list[Any]:
    """An extend option's type reads each item as a list (``seed_nodes = ["a:1,b:2", "c:3"]``
    or ``"a:1,b:2"``): its value is their concatenation, as on the command line."""
    if isinstance(action, argparse._ExtendAction):
        return [item for value in values for item in value]
    return values


def _is_flag(action: argparse.Action) -> bool:
    return action.nargs == 0


def default_of(action: argparse.Action) -> Any:
    """The option's own default, as the parser was built with it."""
    return getattr(action, "configured_default", action.default)


def required(action: argparse.Action) -> bool:
    return bool(getattr(action, "configured_required", action.required))


def configurable(parser: argparse.ArgumentParser) -> None:
    """Give every command ``--config`` and let the command line leave options unset: after
    parsing, ``resolve`` fills each one from the environment, the file or its default. Defaults
    and required marks are kept on the actions, where help and ``resolve`` read them."""
    for leaf in commands(parser).values():
        leaf.add_argument(
            "--config",
            metavar="PATH",
            help=f"a TOML file of option values (env {CONFIG_VARIABLE}; default: none)",
        )
        for action in options(leaf):
            action.configured_default = action.default  # type: ignore[attr-defined]
            action.configured_required = action.required  # type: ignore[attr-defined]
            action.default = None if _is_list(action) else UNSET
            action.required = False


def unset_namespace(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The values of a command line that gives no option at all."""
    return argparse.Namespace(
        config=None, **{a.dest: None if _is_list(a) else UNSET for a in options(parser)}
    )


# -- values ---------------------------------------------------------------------------------------


def _checked(action: argparse.Action, text: str, origin: str) -> Any:
    """``text`` through the option's own type and choices, as argparse checks the command line."""
    try:
        value = action.type(text) if callable(action.type) else text
    except argparse.ArgumentTypeError as e:
        raise ConfigError(f"{origin}: {e}") from None
    except (TypeError, ValueError):
        name = getattr(action.type, "__name__", "value")
        raise ConfigError(f"{origin}: invalid {name} value: {text!r}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(repr, action.choices))
        raise ConfigError(f"{origin}: invalid choice: {text!r} (choose from {choices})")
    return value


def _flag(action: argparse.Action, on: bool) -> Any:
    return action.const if on else default_of(action)


def from_env(action: argparse.Action, text: str) -> Any:
    """A flag is a yes or no word; a list option a TOML array of strings, or one item."""
    origin = env_name(action)
    if _is_flag(action):
        word = text.strip().lower()
        if word not in TRUE_WORDS | FALSE_WORDS:
            raise ConfigError(f"{origin}: {text!r} is not true or false")
        return _flag(action, word in TRUE_WORDS)
    if _is_list(action):
        items = _toml_array(text, origin) if text.lstrip().startswith("[") else [text]
        return _joined(action, [_checked(action, item, origin) for item in items])
    return _checked(action, text, origin)


def _toml_array(text: str, origin: str) -> list[str]:
    try:
        items = tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{origin}: {text!r} is not a TOML array of strings: {e}") from None
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ConfigError(f"{origin}: {text!r} is not a TOML array of strings")
    return items


def from_file(action: argparse.Action, value: object, origin: str) -> Any:
    """A flag is a TOML boolean; a list option an array (or one item); any other option a
    string or number, checked as its text."""
    if _is_flag(action):
        if not isinstance(value, bool):
            raise ConfigError(f"{origin}: {value!r} is not true or false")
        return _flag(action, value)
    if _is_list(action):
        items = value if isinstance(value, list) else [value]
        return _joined(action, [_checked(action, _scalar(item, origin), origin) for item in items])
    return _checked(action, _scalar(value, origin), origin)


def _scalar(value: object, origin: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{origin}: {value!r} is not a string or a number")
    return str(value)


# -- the config file ------------------------------------------------------------------------------


def read_file(path: str) -> dict[str, Any]:
    try:
        text = _bounded_read(path).decode()
        return tomllib.loads(text)
    except OSError as e:
        raise ConfigError(f"config file {path}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} is not TOML: {e}") from None


def _bounded_read(path: str) -> bytes:
    """The file's bytes, if it is a regular file of at most FILE_LIMIT: a FIFO is opened without
    waiting for a writer and refused, as is a device (``/dev/zero`` never ends), before anything
    is read; a larger file is refused after FILE_LIMIT + 1 bytes, whatever its size claims."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"config file {path} is not a regular file ({_kind(mode)})")
        with open(descriptor, "rb", closefd=False) as file:
            data = file.read(FILE_LIMIT + 1)
    finally:
        os.close(descriptor)
    if len(data) > FILE_LIMIT:
        raise ConfigError(f"config file {path} is larger than the limit of {FILE_LIMIT:,} bytes")
    return data


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))  # fmt: skip
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def check_keys(
    parser: argparse.ArgumentParser, doc: Mapping[str, Any], path: str, table: str = ""
) -> None:
    """Refuse a key that is no option of any command under its table, and a table that names no
    command, naming the file and the key."""
    sub = _subcommands(parser)
    names = sub.choices if sub is not None else {}
    known = sorted({a.dest for leaf in commands(parser).values() for a in options(leaf)})
    for key, value in doc.items():
        dotted = f"{table}.{key}" if table else key
        if isinstance(value, dict) and key in names:
            check_keys(names[key], value, path, dotted)
        elif isinstance(value, dict) or key not in known:
            near = difflib.get_close_matches(key.replace("-", "_"), [*known, *names], n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            what = f"onyx {table.replace('.', ' ')}" if table else "onyx"
            raise ConfigError(
                f"config file {path}: unknown key {dotted!r}: no option or command of "
                f"`{what}`{hint}"
            )


def file_values(doc: Mapping[str, Any], words: Sequence[str], path: str) -> dict[str, Any]:
    """The file's values for one command, with the origin of each: the top level, then each
    table along the command's words, the deeper one winning."""
    values: dict[str, Any] = {}
    table: Mapping[str, Any] = doc
    for depth in range(len(words) + 1):
        prefix = ".".join(words[:depth])
        for key, value in table.items():
            if not isinstance(value, dict):
                values[key] = (value, f"{path}: {prefix + '.' if prefix else ''}{key}")
        if depth < len(words):
            table = table.get(words[depth], {})
    return values


# -- resolving ------------------------------------------------------------------------------------


def config_path(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    return args.config or environ.get(CONFIG_VARIABLE) or None


def settings(
    parser: argparse.ArgumentParser,
    words: tuple[str, ...],
    args: argparse.Namespace,
    environ: Mapping[str, str],
) -> list[Setting]:
    """Each option of the command ``words``, with its value and its source; ``args`` holds
    what its command line gave."""
    leaf = commands(parser)[words]
    path = config_path(args, environ)
    values: dict[str, Any] = {}
    if path is not None:
        doc = read_file(path)
        check_keys(parser, doc, path)
        values = file_values(doc, words, path)
    return [_setting(a, getattr(args, a.dest), environ, values) for a in options(leaf)]


def _setting(
    action: argparse.Action, given: Any, environ: Mapping[str, str], file: Mapping[str, Any]
) -> Setting:
    flag = min(action.option_strings, key=lambda s: (not s.startswith("--"), s))
    if given is not (None if _is_list(action) else UNSET):
        return Setting(action.dest, given, "command line", flag)
    if env_name(action) in environ:
        value = from_env(action, environ[env_name(action)])
        return Setting(action.dest, value, "env", env_name(action))
    if action.dest in file:
        raw, origin = file[action.dest]
        return Setting(action.dest, from_file(action, raw, origin), "file", origin)
    if required(action):
        return Setting(action.dest, None, "unset", flag)
    default = default_of(action)
    if isinstance(default, str) and callable(action.type):
        default = _checked(action, default, flag)
    return Setting(action.dest, [] if _is_list(action) and default is None else default,
                   "default", "")  # fmt: skip


def resolve(
    parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str]
) -> None:
    """Fill every option the command line left unset; a required one given nowhere is an
    error naming its flag, its variable and its key."""
    words, _ = command_of(parser, args)
    for setting in settings(parser, words, args, environ):
        if setting.source == "unset":
            raise ConfigError(
                f"{setting.origin} is required: give it on the command line, as "
                f"{ENV_PREFIX}{setting.option.upper()} or as {setting.option} in a config file"
            )
        setattr(args, setting.option, setting.value)


# -- showing --------------------------------------------------------------------------------------


SECRETS = frozenset({"zookeeper_auth"})
"""Options whose values are credentials: shown as USER:*** (a config check's output lands in
logs, such as a deployment's)."""


def _displayed(setting: Setting) -> Any:
    value = _plain(setting.value)
    if setting.option in SECRETS and isinstance(value, str):
        return f"{value.partition(':')[0]}:***"
    return value


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def to_json(shown: Mapping[tuple[str, ...], Sequence[Setting]]) -> str:
    doc = {
        " ".join(words): {
            s.option: {"value": _displayed(s), "source": s.source, "from": s.origin} for s in found
        }
        for words, found in shown.items()
    }
    return json.dumps(doc, indent=2)


def describe(shown: Mapping[tuple[str, ...], Sequence[Setting]], path: str | None) -> str:
    """The effective configuration as a person reads it: one line an option."""
    lines = [f"config file: {path or 'none'}"]
    for words, found in shown.items():
        lines.append(f"onyx {' '.join(words)}")
        width = max((len(s.option) for s in found), default=0)
        for s in found:
            lines.append(f"  {s.option:<{width}}  {_shown(s):<28}  {_source(s)}")
    return "\n".join(lines)


def _shown(setting: Setting) -> str:
    if setting.source == "unset":
        return "(required, not set)"
    value = _displayed(setting)
    if isinstance(value, list):
        return json.dumps(value, ensure_ascii=False)
    return "(none)" if value is None else str(value)


def _source(setting: Setting) -> str:
    return f"{setting.source} ({setting.origin})" if setting.origin else setting.source


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows each option's default (or that it is required) and its variable; the
    description and epilog keep their line breaks, for examples."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not hasattr(action, "configured_default"):
            return text
        notes = ["required"] if required(action) else []
        if not required(action) and not _is_flag(action):
            notes.append(f"default: {_default_text(default_of(action))}")
        notes.append(f"env {env_name(action)}")
        return f"{text} ({'; '.join(notes).replace('%', '%%')})".lstrip()


def _default_text(value: Any) -> str:
    return "none" if value in (None, [], "") else str(value)
