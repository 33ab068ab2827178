"""Avro schema resolution rules behind the schema compatibility strategies."""

from collections.abc import Mapping

from broker.service.avro_compat import can_read


def record(*fields: Mapping[str, object]) -> dict[str, object]:
    return {"type": "record", "name": "R", "fields": list(fields)}


OPT_INT = {"name": "a", "type": ["null", "int"], "default": None}
REQ_INT = {"name": "a", "type": "int"}
OPT_STR = {"name": "a", "type": ["null", "string"], "default": None}


def test_identical_records_are_compatible() -> None:
    assert can_read(record(OPT_INT), record(OPT_INT))


def test_changed_field_type_is_incompatible_both_ways() -> None:
    assert not can_read(record(OPT_STR), record(OPT_INT))
    assert not can_read(record(OPT_INT), record(OPT_STR))


def test_optional_reader_reads_required_writer_but_not_back() -> None:
    assert can_read(record(OPT_INT), record(REQ_INT))  # FORWARD from required to optional holds
    assert not can_read(record(REQ_INT), record(OPT_INT))  # null cannot become int


def test_new_field_needs_default() -> None:
    extra = {"name": "b", "type": "long"}
    assert not can_read(record(REQ_INT, extra), record(REQ_INT))
    assert can_read(record(REQ_INT, {**extra, "default": 0}), record(REQ_INT))
    assert can_read(record(REQ_INT), record(REQ_INT, extra))  # dropped fields are skipped


def test_promotions() -> None:
    assert can_read("long", "int") and can_read("double", "float") and can_read("bytes", "string")
    assert not can_read("int", "long")


def test_enums_arrays_maps() -> None:
    e1 = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
    e2 = {"type": "enum", "name": "E", "symbols": ["A"]}
    assert can_read(e1, e2) and not can_read(e2, e1)
    assert can_read({"type": "array", "items": "long"}, {"type": "array", "items": "int"})
    assert not can_read({"type": "map", "values": "int"}, {"type": "map", "values": "string"})
