"""A config file read and parsed within bounds: a regular file (never a FIFO or a device: they would block or
never end) of at most MAX_CONFIG_BYTES, UTF-8, and YAML whose nesting and alias expansion are bounded while it
is composed (a document nested 20,000 deep or a "billion laughs" of aliases is refused, not expanded).
cluster/shared/config.py puts the file's name before their messages (as its ConfigError)."""

from __future__ import annotations

import functools
import os
import re
import stat
from typing import Any

from cluster.shared.limits import MAX_CONFIG_BYTES, MAX_YAML_DEPTH, MAX_YAML_EXPANDED
from tfdist.errors import UserError


class ConfigFileError(UserError, ValueError):
    """The file cannot be a config: the message names why and the fix (without the file's name)."""


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_text(path: str) -> str:
    """The file's text. Opened without blocking (a FIFO with no writer would hold `open` forever), refused
    unless a regular file, read up to MAX_CONFIG_BYTES + 1 bytes only, decoded as UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise ConfigFileError(f"cannot read config file: {e.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise ConfigFileError(f"is {kind}, not a config file; give a YAML file")
        data = b""
        while len(data) <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, MAX_CONFIG_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as e:
        raise ConfigFileError(f"cannot read config file: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigFileError(f"is larger than {MAX_CONFIG_BYTES // 1024:,} KiB; a config file is a few lines of YAML")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigFileError(f"is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); save it as "
                              "UTF-8") from None


MAX_INT_DIGITS = 4_000


@functools.cache
def _loader() -> type:
    """The bounded loader class, made on first use: PyYAML is imported only by what reads YAML (a launch
    with no config file, `tfdist jobs`... never do; 0.02-0.03 s of each command's start)."""
    import yaml

    class _BoundedLoader(yaml.SafeLoader):
        """PyYAML's safe loader, bounded while composing: nesting deeper than MAX_YAML_DEPTH, an alias to the
        node that contains it, or a document whose nodes and scalar characters with every alias expanded pass
        MAX_YAML_EXPANDED are refused. The composed graph shares aliased nodes (the constructor builds each
        once), so composing stays linear in the text; the bound is on what a reader of the value would walk."""

        def __init__(self, stream):
            super().__init__(stream)
            self._depth = 0
            self._expanded = 0
            self._sizes: dict[int, int] = {}  # id(node) -> its expanded size, once composed

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                node = self.anchors.get(event.anchor)
                if node is not None:
                    size = self._sizes.get(id(node))
                    if size is None:
                        raise ConfigFileError(f"line {event.start_mark.line + 1}: alias *{event.anchor} refers to a "
                                              "node that contains it; a config cannot be recursive")
                    self._grow(size, event)
                return super().compose_node(parent, index)
            event = self.peek_event()
            self._depth += 1
            if self._depth > MAX_YAML_DEPTH:
                raise ConfigFileError(f"line {event.start_mark.line + 1}: nested deeper than {MAX_YAML_DEPTH} levels")
            start = self._expanded
            self._grow(1 + len(getattr(event, "value", "") or ""), event)
            node = super().compose_node(parent, index)
            self._depth -= 1
            self._sizes[id(node)] = self._expanded - start
            return node

        def _grow(self, size: int, event) -> None:
            self._expanded += size
            if self._expanded > MAX_YAML_EXPANDED:
                raise ConfigFileError(f"line {event.start_mark.line + 1}: the document expands (aliases included) to "
                                      f"more than {MAX_YAML_EXPANDED:,} nodes and characters; write it out without "
                                      "nested aliases")

    def _construct_int(loader: _BoundedLoader, node) -> int:
        digits = len(node.value)
        if digits > MAX_INT_DIGITS:  # Python refuses to convert it anyway (sys.get_int_max_str_digits)
            raise ConfigFileError(f"line {node.start_mark.line + 1}: a number of {digits:,} digits; tfdist reads at "
                                  f"most {MAX_INT_DIGITS:,} (quote it to keep it as text)")
        return yaml.SafeLoader.construct_yaml_int(loader, node)

    _BoundedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
    # YAML 1.2 (Determined's Go parser) reads `1e-4` as a float; PyYAML's 1.1 rules need a dot (`1.0e-4`) and
    # would hand `learning_rate: 1e-4` to the workers as the text "1e-4". Tried after PyYAML's own rules.
    _BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
                                         list("-+0123456789"))

    return _BoundedLoader


def yaml_errors() -> type[Exception]:
    """PyYAML's base error (a document's syntax), for `except config_file.yaml_errors()`: evaluated only when
    something was raised, so catching it imports nothing up front."""
    import yaml

    return yaml.YAMLError


def load_yaml(text: str) -> Any:
    """yaml.safe_load within the bounds above. Raises yaml.YAMLError (the document's syntax) or
    ConfigFileError (a bound)."""
    loader = _loader()(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
