"""The errors hlo-analyzer raises for bad input.

Every error a user can cause derives from :class:`AnalyzerError` and says three things: which input was
wrong, where (path, line and column when there is one), and what would have been valid. Library
exceptions (Lark, jax, KeyError) never reach the caller; they are translated at the boundary where they
happen.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from difflib import get_close_matches
from typing import Any

__all__ = [
    "AnalyzerError",
    "HloSyntaxError",
    "HloSemanticError",
    "ShardingError",
    "HardwareError",
    "ConfigError",
    "MeshError",
    "LoweringError",
    "EntryPointError",
    "OutputError",
    "CompileTimeout",
    "valid_choices",
    "load_toml",
    "find_key_line",
    "find_table_line",
    "find_value_line",
    "toml_line",
]


def valid_choices(given: str, choices: Iterable[str], *, what: str = "value") -> str:
    """A sentence listing the valid choices, with a 'did you mean' for a near miss.

    Example:
        >>> valid_choices("tpu-v5", ["tpu-v5e", "tpu-v6e", "h100"], what="hardware")
        "did you mean 'tpu-v5e'? valid hardware: h100, tpu-v5e, tpu-v6e"
    """
    options = sorted(set(choices))
    close = get_close_matches(given, options, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}valid {what}: {', '.join(options) if options else '(none)'}"


class AnalyzerError(Exception):
    """Base of every error caused by bad input to hlo-analyzer.

    Attributes:
      key: the configuration key the input came from (`hardware`, `mesh`, a rule's option...), where it came from
        a configuration, so a reader of the config can point at that key's line; None otherwise.
      table: the configuration table that key is in, where it is not the tool's own table.
    """

    key: str | None = None
    table: str | None = None


class _PositionedError(AnalyzerError):
    """An error at a place in a text: path, 1-based line and column, and the source line with a caret."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
        source_line: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.column = column
        self.source_line = source_line
        super().__init__(self._format())

    _UNNAMED = "<hlo text>"  # what to call an input given as text rather than a file

    def _format(self) -> str:
        where = self.path or self._UNNAMED
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        text = f"{where}: error: {self.message}" if where else f"error: {self.message}"
        if self.source_line is not None:
            shown, column = _excerpt(self.source_line.rstrip("\n"), self.column)
            text += f"\n{shown}"
            if column is not None:
                # Keep tabs so the caret lines up under the offending character.
                prefix = "".join(c if c == "\t" else " " for c in shown[: max(column - 1, 0)])
                text += f"\n{prefix}^"
        return text


_EXCERPT = 160  # characters of a source line an error shows around its column


def _excerpt(line: str, column: int | None) -> tuple[str, int | None]:
    """The part of `line` an error message shows (at most about `_EXCERPT` characters around `column`, the cut
    ends marked `...`), and the column within it: a 50 MB line must not print 50 MB. The message keeps the
    real column number.

    Example:
        >>> shown, col = _excerpt("x" * 1000 + "!" + "y" * 1000, 1001)
        >>> len(shown) < 200, shown[col - 1]
        (True, '!')
    """
    if len(line) <= _EXCERPT:
        return line, column
    at = min(max((column or 1) - 1, 0), len(line))
    start = max(0, at - _EXCERPT // 2)
    end = min(len(line), start + _EXCERPT)
    start = max(0, end - _EXCERPT)
    head = "..." if start > 0 else ""
    tail = "..." if end < len(line) else ""
    return head + line[start:end] + tail, (at - start + len(head) + 1) if column is not None else None


class HloSyntaxError(_PositionedError):
    """HLO text that does not follow XLA's grammar."""


class HloSemanticError(_PositionedError):
    """Well-formed HLO that is inconsistent: an undefined operand or computation, a duplicate name, two ROOTs."""


class ShardingError(AnalyzerError):
    """A sharding that cannot hold: a mesh axis used twice, an unknown axis, a dimension it does not divide."""


class HardwareError(AnalyzerError):
    """An unknown hardware name or topology, or a spec file that does not follow the schema."""


class ConfigError(_PositionedError):
    """A bad key or value in `[tool.hlo-analyzer]`, a report config or a baseline file."""

    _UNNAMED = ""  # a config given as a value (a dict, the command line): no file to name


class MeshError(AnalyzerError):
    """A mesh that does not fit the devices or the HLO (wrong device count, axis names, sizes)."""


class LoweringError(AnalyzerError):
    """The function could not be lowered or compiled for the requested target."""


_TOML_PLACE = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)")


def load_toml(text: str, *, path: str | None = None) -> dict[str, Any]:
    """Parse TOML text; a syntax error becomes a `ConfigError` at its line and column, with the source line.

    Args:
      text: the TOML.
      path: the file it came from, for the message.

    Raises:
      ConfigError: the text is not TOML (`tomllib`'s message, without its own "(at line, column)").

    Example:
      >>> load_toml('name = "demo"')
      {'name': 'demo'}
      >>> load_toml("a = [1,", path="train.toml")
      Traceback (most recent call last):
        ...
      analyzer.errors.ConfigError: train.toml:1:8: error: not valid TOML: Invalid value
      a = [1,
             ^
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = _TOML_PLACE.search(str(e))
        line = column = None
        if m and m.group(1):
            line, column = int(m.group(1)), int(m.group(2))
        elif m:  # at the end of the document: the last line
            lines = text.splitlines()
            line = max(1, len(lines))
            column = len(lines[-1]) + 1 if lines else 1
        message = _TOML_PLACE.sub("", str(e)) or "invalid TOML"
        lines = text.splitlines()
        source = lines[line - 1] if line and 0 < line <= len(lines) else None
        raise ConfigError(f"not valid TOML: {message}", path=path, line=line, column=column,
                          source_line=source) from None


_HEADER = re.compile(r"^\s*\[\[?\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")


def _header_name(raw: str) -> str:
    return raw.replace('"', "").replace("'", "").replace(" ", "")


def find_key_line(text: str, key: str, table: str = "", *, deep: bool = False) -> int | None:
    """The 1-based line where `key` is written inside `[table]` ("" for the top level) of a TOML text, or None.

    The one place that maps TOML keys back to lines, for every config (`[tool.hlo-analyzer]`, report configs,
    hardware specs). It accepts bare and quoted keys, kebab- or snake_case spellings, a sub-table header
    naming the key (`[rules.HA301]`), the table written inline from its parent (`mesh = { data = 4 }`) or as
    dotted keys (`model.d_model = ...`). `deep`: keys of the table's sub-tables count too (the first match).

    Example:
        >>> find_key_line('a = 1\\n[model]\\nd_model = 2\\n', "d_model", "model")
        3
        >>> find_key_line('[tool.hlo-analyzer]\\nmesh = { X = 0 }\\n', "X", "tool.hlo-analyzer.mesh")
        2
    """
    spellings = {key, key.replace("_", "-"), key.replace("-", "_")}
    alt = "|".join(re.escape(s) for s in sorted(spellings))
    key_re = re.compile(rf"""^\s*(?:(?:{alt})|"(?:{alt})"|'(?:{alt})')\s*=""")
    inline_re = re.compile(rf"""[{{,]\s*(?:(?:{alt})|"(?:{alt})"|'(?:{alt})')\s*=""")
    own_headers = {f"{table}.{s}" if table else s for s in spellings}
    current = ""
    for n, line in enumerate(text.splitlines(), start=1):
        m = _HEADER.match(line)
        if m:
            current = _header_name(m.group(1))
            if current in own_headers:
                return n
            if deep and current.startswith(f"{table}.") and current.rsplit(".", 1)[-1] in spellings:
                return n
            continue
        inside = current == table or (deep and current.startswith(f"{table}."))
        if inside and (key_re.match(line) or (deep and inline_re.search(line))):
            return n
        # The table written from an enclosing one: `mesh = { X = 0 }` or `mesh.X = 0`.
        if table and (current == "" or table.startswith(current + ".")):
            rest = table[len(current) + 1:] if current else table
            if re.match(rf"^\s*{re.escape(rest)}\s*=", line) and inline_re.search(line):
                return n
            if re.match(rf"^\s*{re.escape(rest)}\.(?:{alt})\s*=", line):
                return n
    return None


def find_table_line(text: str, table: str) -> int | None:
    """The 1-based line of the `[table]` header (or of `table = {...}` written inline in its parent), or None."""
    parent, _, name = table.rpartition(".")
    current = ""
    for n, line in enumerate(text.splitlines(), start=1):
        m = _HEADER.match(line)
        if m:
            current = _header_name(m.group(1))
            if current == table:
                return n
            continue
        if current == parent and re.match(rf"""^\s*(?:{re.escape(name)}|"{re.escape(name)}")\s*=""", line):
            return n
    return None


def find_value_line(text: str, value: str) -> int | None:
    """The 1-based line of the first quoted string `value` (a rule code inside `select = [...]`), or None."""
    for n, line in enumerate(text.splitlines(), start=1):
        if re.search(rf"""["']{re.escape(value)}["']""", line):
            return n
    return None


def toml_line(text: str | None, line: int | None) -> str | None:
    """The text of 1-based `line`, for a positioned error's source line (None when there is none)."""
    if text is None or line is None:
        return None
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else None


class EntryPointError(AnalyzerError):
    """User code (an entry point or its module) failed: it did not import, raised, called `sys.exit`, hung,
    or returned something that is not `(jitted function, args[, kwargs])`.

    Attributes:
      entry: the entry point as given (`module:function`).
      where: `file:line` of the user's frame closest to the failure, or None.
      cause: a one-line description of the exception (`NameError: name 'x' is not defined`), or None.
    """

    def __init__(self, message: str, *, entry: str, where: str | None = None, cause: str | None = None) -> None:
        self.entry = entry
        self.where = where
        self.cause = cause
        text = f"entry point {entry!r}"
        if where:
            text += f" ({where})"
        text += f": {message}"
        if cause:
            text += f": {cause}"
        super().__init__(text)


class CompileTimeout(EntryPointError):
    """An entry point or its compile ran past the time limit (`--timeout`, config `timeout`)."""


class OutputError(AnalyzerError):
    """A file the tool was asked to write cannot be written (a folder of that name, a read-only folder, a
    full disk); the old file, if any, is left as it was."""
