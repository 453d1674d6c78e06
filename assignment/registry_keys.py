"""How the registry's schema declares what each key accepts, and the one reader that checks a TOML table against it.

Every field of a schema dataclass (assignment/registry_schema.py) that the file sets is declared with
``registry_key``: a short description, the kind of value (``KINDS``), its range or choices, whether it is required
and its default (the dataclass default). ``read_table`` builds the dataclass from a table: it refuses unknown keys,
missing required ones, values of the wrong kind and values out of range, each error naming the file, the task, the
table path and the key. What no single key can say (thresholds that must add up, a rule that names a bench case)
stays with the readers that know both keys (assignment/registry_tasks.py, assignment/registry_course.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from collections.abc import Callable

METADATA = "registry"  # the field-metadata entry that holds a field's Key

# What a key may hold: a finite number (int or float, read as float), a whole number, a string, true or false, a
# list of non-empty strings or of numbers (read as tuples), a table (a nested schema dataclass, a map of numbers, or
# kept as a dict), an array of tables (a tuple of those), or the id of one of the registry's tasks.
KINDS = ("number", "integer", "string", "bool", "strings", "numbers", "table", "tables", "task")


class RegistryError(ValueError):
    """A problem in the registry, naming the file, the task and the field."""

    def __init__(self, path: Path, task: str | None, field_name: str, message: str):
        where = f"{path}"
        if task:
            where += f": task {task}"
        where += f": field '{field_name}'"
        super().__init__(f"{where}: {message}")
        self.path, self.task, self.field_name = path, task, field_name


@dataclass(frozen=True, kw_only=True)
class Key:
    """What one registry key accepts: declared on its schema field by ``registry_key``."""

    about: str  # what the key is for (a missing key's error says it)
    kind: str  # one of KINDS
    toml: str = ""  # its name in the file when not the field's; "draw.count": a key inside the table draw
    required: bool = False  # required although the field has a default (which holds when the whole table is left out)
    instructor: bool = False  # required in the instructor's edition only (the reasoning the student edition drops)
    minimum: float | None = None  # a number's range (every item's, for "numbers" and a table of numbers)
    above: float | None = None
    maximum: float | None = None
    below: float | None = None
    choices: tuple = ()  # the values it may take (for a "named" table: the names its tables may have)
    pattern: re.Pattern | None = None  # a string's (every string's) form, which `expects` says in words
    expects: str = ""  # the words after "must be", when the kind's own would not say enough
    min_chars: int = 0  # a string's shortest length, blanks at either end aside
    length: int | None = None  # a list's length
    nonempty: bool = False  # a list or table that must hold something
    item: type | None = None  # the schema dataclass of a table, or of each table of an array
    named: str = ""  # a table of `item` tables: each one's name fills this field of it
    numbers: bool = False  # a table mapping names to numbers (in range)
    read: Callable | None = None  # read(value, where, name): a reader of its own for a key whose form is its own
    clean: Callable | None = None  # applied to what was read (to each string of "strings")

    def describe(self) -> str:
        """What the key must be, in words: the end of "must be ..."."""
        if self.named:
            return f"a table of tables, each named for {self.expects}"
        if self.expects:
            return self.expects
        if self.choices:
            return f"one of {self.choices}"
        bounds = _bounds(self)
        if self.kind in ("number", "integer"):
            return ("a number" if self.kind == "number" else "a whole number") + bounds
        if self.kind == "numbers":
            count = f"{self.length} " if self.length else ""
            return f"a list of {count}numbers{bounds}"
        if self.kind == "string":
            return f"a string of {self.min_chars} characters or more" if self.min_chars else "a string"
        if self.kind == "strings":
            return "a non-empty list of non-empty strings" if self.nonempty else "a list of non-empty strings"
        if self.kind == "tables":
            return "an array of tables"
        return {"bool": "true or false", "table": "a table", "task": "a task id"}[self.kind]


def _bounds(key: Key) -> str:
    if key.minimum is not None and key.maximum is not None:
        return f" from {key.minimum:g} to {key.maximum:g}"
    parts = [
        f"{sign} {bound:g}"
        for sign, bound in ((">=", key.minimum), (">", key.above), ("<=", key.maximum), ("<", key.below))
        if bound is not None
    ]
    return (" " + " and ".join(parts)) if parts else ""


def registry_key(about: str, kind: str, *, default: Any = MISSING, default_factory: Any = MISSING, **accepts) -> Any:
    """A schema field the registry sets: ``about`` says what it is for, ``kind`` what it holds, ``accepts`` narrows
    it (``Key``'s other fields); ``default`` or ``default_factory``, as ``dataclasses.field`` takes them, is the value
    when the file leaves the key out (none: the key is required)."""
    if kind not in KINDS:
        raise ValueError(f"registry_key: kind {kind!r} is not one of {KINDS}")
    key = Key(about=about, kind=kind, **accepts)
    return field(default=default, default_factory=default_factory, metadata={METADATA: key})


@dataclass(frozen=True)
class Where:
    """Where a table is in the registry: the file, the task (None: course-level), the table path as the prefix of
    its keys (``timing[0].``), the edition being read, and the registry's task ids (for ``task`` keys)."""

    path: Path
    task: str | None = None
    prefix: str = ""
    edition: str = "instructor"
    task_ids: tuple[str, ...] = ()

    def inside(self, name: str) -> Where:
        return replace(self, prefix=f"{self.prefix}{name}.")

    def error(self, name: str, message: str) -> RegistryError:
        return RegistryError(self.path, self.task, f"{self.prefix}{name}", message)

    def table_error(self, message: str) -> RegistryError:
        return RegistryError(self.path, self.task, self.prefix[:-1] or "-", message)


def declared_keys(cls: type) -> dict[str, Key]:
    """The fields of ``cls`` the registry sets, by field name."""
    return {f.name: f.metadata[METADATA] for f in fields(cls) if METADATA in f.metadata}


def read_table(cls: type, raw: Any, where: Where, given: dict[str, Any] | None = None):
    """``cls`` built from the TOML table ``raw``: every declared key checked, the rest of its fields from ``given``
    (what the caller derived) or their defaults. Unknown keys are refused first (a misspelt key is unknown, not a
    missing one)."""
    if not isinstance(raw, dict):
        raise where.table_error(f"must be a table, got {raw!r}")
    values = dict(given or {})
    keys = {f.name: (f, f.metadata[METADATA]) for f in fields(cls) if METADATA in f.metadata}
    _refuse_unknown(raw, [key.toml or name for name, (_, key) in keys.items()], where)
    for name, (dataclass_field, key) in keys.items():
        toml_name = key.toml or name
        found, value = _lookup(raw, toml_name, where)
        if not found:
            has_default = dataclass_field.default is not MISSING or dataclass_field.default_factory is not MISSING
            if key.required or not has_default or (key.instructor and where.edition != "student"):
                raise where.error(toml_name, f"is missing ({key.about})")
            continue
        values[name] = read_value(key, value, where, toml_name)
    return cls(**values)


def _refuse_unknown(raw: dict, names: list[str], where: Where) -> None:
    """Refuse a key no field declares, in the table and in a table that dotted names reach into (``proof`` of
    ``proof.title`` and ``proof.points``), unless that table is also read whole (``draw``, whose keys are its own)."""
    inner: dict[str, list[str]] = {}
    for name in names:
        top, _, rest = name.partition(".")
        inner.setdefault(top, []).append(rest)  # "": the whole table is one key's
    _refuse(raw, list(inner), where)
    for top, rests in inner.items():
        if isinstance(raw.get(top), dict) and all(rests):
            _refuse(raw[top], rests, where.inside(top))


def _refuse(table: dict, taken: list[str], where: Where) -> None:
    unknown = sorted(set(table) - set(taken))
    if unknown:
        raise where.error(unknown[0], f"unknown field {unknown[0]!r}: the table takes {', '.join(taken)}")


def _lookup(raw: dict, toml_name: str, where: Where) -> tuple[bool, Any]:
    """A key's value: ``draw.count`` looks inside the table ``draw``."""
    table, *inner = toml_name.split(".")
    if table not in raw:
        return False, None
    value = raw[table]
    if not inner:
        return True, value
    if not isinstance(value, dict):
        raise where.error(table, f"must be a table, got {value!r}")
    return _lookup(value, ".".join(inner), where.inside(table))


def read_value(key: Key, value: Any, where: Where, name: str) -> Any:
    """One key's value checked against its declaration and converted (numbers to float, lists to tuples, tables to
    their dataclass)."""
    if key.read is not None:
        value = key.read(value, where, name)
    else:
        value = _checked(key, value, where, name)
    if key.clean is not None:
        value = tuple(key.clean(v) for v in value) if key.kind == "strings" else key.clean(value)
    return value


def _checked(key: Key, value: Any, where: Where, name: str) -> Any:
    def refuse() -> RegistryError:
        return where.error(name, f"must be {key.describe()}, got {value!r}")

    kind = key.kind
    if kind == "number":
        if not _number_in_range(key, value):
            raise refuse()
        return float(value)
    if kind == "integer":
        if not (isinstance(value, int) and not isinstance(value, bool) and _number_in_range(key, value)):
            raise refuse()
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise refuse()
        return value
    if kind == "string":
        ok = isinstance(value, str) and len(value.strip()) >= key.min_chars
        if not ok or (key.choices and value not in key.choices) or (key.pattern and not key.pattern.match(value)):
            raise refuse()
        return value
    if kind == "task":
        if not isinstance(value, str) or value not in where.task_ids:
            raise where.error(
                name,
                f"names no task of the registry ({value!r} is not a task id; the tasks: {', '.join(where.task_ids)})",
            )
        return value
    if kind == "strings":
        ok = isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)
        if not ok or (key.nonempty and not value) or (key.pattern and not all(key.pattern.match(v) for v in value)):
            raise refuse()
        return tuple(value)
    if kind == "numbers":
        ok = isinstance(value, list) and all(_number_in_range(key, v) for v in value)
        if not ok or (key.length is not None and len(value) != key.length):
            raise refuse()
        return tuple(float(v) for v in value)
    if kind == "table":
        if not isinstance(value, dict):
            raise refuse()
        if key.item is not None and key.named:
            return _read_named(key, value, where, name)
        if key.item is not None:
            return read_table(key.item, value, where.inside(name))
        if key.numbers:
            if not all(_number_in_range(key, v) for v in value.values()):
                raise refuse()
            return {str(k): float(v) for k, v in value.items()}
        return dict(value)
    # tables
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value) or (key.nonempty and not value):
        raise refuse()
    if key.item is None:
        return tuple(dict(v) for v in value)
    return tuple(read_table(key.item, v, where.inside(f"{name}[{i}]")) for i, v in enumerate(value))


def _read_named(key: Key, value: dict, where: Where, name: str) -> tuple:
    """A table of tables, each read as ``key.item`` with its name as the field ``key.named``, in the file's order."""
    inner = where.inside(name)
    read = []
    for entry, table in value.items():
        if key.choices and entry not in key.choices:
            raise inner.error(entry, f"is not {key.expects}: one of {key.choices}")
        read.append(read_table(key.item, table, inner.inside(entry), given={key.named: entry}))
    if key.nonempty and not read:
        raise where.error(name, f"must name at least one {key.expects.removeprefix('a ')}")
    return tuple(read)


def _number_in_range(key: Key, value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return (
        (key.minimum is None or value >= key.minimum)
        and (key.above is None or value > key.above)
        and (key.maximum is None or value <= key.maximum)
        and (key.below is None or value < key.below)
    )
