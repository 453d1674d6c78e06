"""The registry's keys are checked by what the schema declares of each: a wrong type, an unknown key, a missing key
and a value out of range each name the file, the task, the table path and the key."""

from __future__ import annotations

import copy
import re
import tomllib
from dataclasses import dataclass, fields

import pytest

from assignment.registry import REGISTRY_PATH, RegistryError, load_registry, parse_registry
from assignment.registry_keys import KINDS, METADATA, Where, read_table, registry_key
from assignment import registry_schema

pytestmark = pytest.mark.kit


def variant(tmp_path, old: str, new: str):
    text = REGISTRY_PATH.read_text()
    assert text.count(old) >= 1, f"test setup: {old!r} not in the registry"
    path = tmp_path / "tasks.toml"
    path.write_text(text.replace(old, new, 1))
    return path


T4_RULE1 = "thresholds = [{ at = 1.25, points = 4 }"
T2_SHARDS = "shards = 2\n"


@pytest.mark.parametrize(
    "old, new, error",
    [
        # A wrong type, three tables deep: t4's first timing rule's first threshold.
        (
            T4_RULE1,
            T4_RULE1.replace("points = 4", 'points = "ten"'),
            r"task t4: field 'timing\[0\]\.thresholds\[0\]\.points': must be a number >= 0, got 'ten'",
        ),
        (T2_SHARDS, 'shards = "2"\n', r"task t2: field 'grading\.shards': must be a whole number from 1 to 8, got '2'"),
        (
            "public_seed = 1234",
            "public_seed = 1234.5",
            r"field 'course\.public_seed': must be a whole number, got 1234\.5",
        ),
        ('device = "gpu"', "device = 1", r"task t2: field 'device': must be one of \('any', 'gpu', 'hopper'\), got 1"),
        ('files = ["t2_softmax.cu"]', 'files = "t2_softmax.cu"', r"task t2: field 'files': must be a non-empty list"),
        # Out of range.
        (T4_RULE1, T4_RULE1.replace("points = 4", "points = -4"), r"thresholds\[0\]\.points': must be a number >= 0"),
        (
            T4_RULE1,
            T4_RULE1.replace("at = 1.25", "at = 0"),
            r"task t4: field 'timing\[0\]\.thresholds\[0\]\.at': .*> 0",
        ),
        (T2_SHARDS, "shards = 9\n", r"task t2: field 'grading\.shards': must be a whole number from 1 to 8, got 9"),
        ("max_file_bytes = 5242880", "max_file_bytes = 0", r"field 'course\.max_file_bytes': .* > 0, got 0"),
        ("timeout_s = 180", "timeout_s = -1", r"task t2: field 'grading\.timeout_s': must be a number > 0, got -1"),
        ("points = 3, count = 1", "points = 3, count = 0", r"field 'theory\.questions\.hbm\.count': .* >= 1, got 0"),
        (
            'reference = 1.02, gpu = "NVIDIA H100 80GB HBM3"',
            'reference = 1.02, overhead_ms = -0.5, gpu = "NVIDIA H100 80GB HBM3"',
            r"task t2: field 'timing\[0\]\.student\.overhead_ms': must be a number >= 0, got -0\.5",
        ),
        # Unknown keys: a misspelt one is unknown (not its correct spelling missing), at every depth.
        (
            'slug = "cuda-softmax"',
            'slgu = "cuda-softmax"',
            r"task t2: field 'slgu': unknown field 'slgu': the table takes id",
        ),
        (
            T2_SHARDS,
            "shard = 2\n",
            r"task t2: field 'grading\.shard': unknown field 'shard': the table takes timeout_s",
        ),
        ("public_seed = 1234", "public_seed = 1234\npublic_sed = 1", r"field 'course\.public_sed': unknown field"),
        ("[theory.proof]\n", "[theory.proof]\npages = 2\n", r"field 'theory\.proof\.pages': unknown field 'pages'"),
        ("[hidden_seed]\nsalt", "[hiden_seed]\nsalt", r"field 'hiden_seed': is not a table of the registry"),
        (
            "[task.shapes]\n",
            "[task.shapes]\nprivate = []\n",
            r"task t1: field 'shapes\.private': unknown field 'private': the table takes public",
        ),
        # Missing keys, with what the key is for.
        (
            'reference = "the reference solution\'s softmax"\n',
            "",
            r"task t2: field 'timing\[0\]\.reference': is missing \(what the student's time is compared with\)",
        ),
        ("[theory.proof]\ntitle = ", "[theory.proof]\nheading = ", r"field 'theory\.proof\.heading': unknown field"),
        ("timeout_s = 180\n", "", r"task t2: field 'grading\.timeout_s': is missing \(the whole suite's limit\)"),
    ],
)
def test_a_bad_key_names_the_file_the_task_the_table_and_the_key(tmp_path, old, new, error):
    path = variant(tmp_path, old, new)
    with pytest.raises(RegistryError) as raised:
        load_registry(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: "), f"the error must start with the file it is about: {message}"
    assert re.search(error, message), f"expected /{error}/ in: {message}"


def tables(value, path: str = ""):
    """Every table inside ``value``, with the registry's path to it (``timing[0].student``)."""
    if isinstance(value, dict):
        yield value, path
        for key, item in value.items():
            yield from tables(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from tables(item, f"{path}[{i}]")


def table_at(data: dict, task: str | None, path: str) -> dict:
    root = data if task is None else next(raw for raw in data["task"] if raw["id"] == task)
    return next(table for table, at in tables(root) if at == path)


# Tables whose keys are a workload's, read by the task's code (a shape's B, H, Lq, ...): any key is theirs.
WORKLOAD_TABLES = re.compile(r"^(shapes\.public\[\d+\]|hidden\.shapes\[\d+\]|timing\[\d+\]\.shape)$")


def test_no_table_of_the_registry_takes_a_key_nobody_reads():
    data = tomllib.loads(REGISTRY_PATH.read_text())
    places = [(None, path) for _, path in tables(data) if not path.startswith("task")]
    places += [(raw["id"], path) for raw in data["task"] for _, path in tables(raw)]
    checked = 0
    for task, path in places:
        if WORKLOAD_TABLES.match(path):
            continue
        edited = copy.deepcopy(data)
        table_at(edited, task, path)["zzz_unknown"] = "zzz"
        with pytest.raises(RegistryError) as raised:
            parse_registry(edited, REGISTRY_PATH)
        named = raised.value.field_name
        assert raised.value.task == task and named in (path, f"{path}.zzz_unknown".lstrip(".")), (
            f"a key added to {task or 'the course'}'s table '{path}' was refused as {named!r}: {raised.value}"
        )
        checked += 1
    assert checked > 100, f"the walk reached only {checked} tables"


def test_the_declarations_read_a_table_of_their_own():
    @dataclass(frozen=True, kw_only=True)
    class Sample:
        size: int = registry_key("a size", "integer", minimum=1, maximum=4)
        ratio: float = registry_key("a ratio", "number", above=0, below=1, default=0.5)
        names: tuple[str, ...] = registry_key("names", "strings", default=())
        derived: str = "given"

    where = Where(path=REGISTRY_PATH, task="t9", prefix="sample.")
    assert read_table(Sample, {"size": 2}, where) == Sample(size=2)
    assert read_table(Sample, {"size": 4, "ratio": 0.25, "names": ["a"]}, where, given={"derived": "x"}) == Sample(
        size=4, ratio=0.25, names=("a",), derived="x"
    )
    for raw, error in (
        ({"size": 5}, r"task t9: field 'sample\.size': must be a whole number from 1 to 4, got 5$"),
        ({"size": True}, r"field 'sample\.size': must be a whole number from 1 to 4, got True$"),
        ({"size": 2, "ratio": 1}, r"field 'sample\.ratio': must be a number > 0 and < 1, got 1$"),
        ({"size": 2, "ratio": float("nan")}, r"field 'sample\.ratio': must be a number > 0 and < 1, got nan$"),
        ({"size": 2, "names": ["a", ""]}, r"field 'sample\.names': must be a list of non-empty strings"),
        ({}, r"field 'sample\.size': is missing \(a size\)$"),
        ({"size": 2, "derived": "y"}, r"field 'sample\.derived': unknown field 'derived': the table takes size, ratio"),
        ([1], r"field 'sample': must be a table, got \[1\]$"),
    ):
        with pytest.raises(RegistryError, match=error):
            read_table(Sample, raw, where)
    with pytest.raises(ValueError, match="kind 'float'"):
        registry_key("a ratio", "float")


def test_every_key_the_file_sets_is_declared_with_what_it_is_for():
    """A field is either declared (a description and a kind) or derived by the loader, never read by hand."""
    derived = {("Registry", "path"), ("Registry", "tasks"), ("Registry", "theory"), ("Registry", "hidden_seed_salt")}
    derived |= {("Registry", "chapters"), ("TheoryKind", "name"), ("TheoryKind", "bonus")}
    schema = [
        value
        for value in vars(registry_schema).values()
        if isinstance(value, type)
        and value.__module__ == registry_schema.__name__
        and hasattr(value, "__dataclass_fields__")
    ]
    assert len(schema) >= 12
    for cls in schema:
        for field in fields(cls):
            key = field.metadata.get(METADATA)
            if key is None:
                assert (cls.__name__, field.name) in derived, f"{cls.__name__}.{field.name} declares nothing"
                continue
            assert key.about and key.kind in KINDS and key.describe(), f"{cls.__name__}.{field.name}"
