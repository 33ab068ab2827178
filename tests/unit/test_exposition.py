"""The Prometheus text writer: escaping, sample formatting, histograms, one header per family."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from broker.admin.exposition import COUNTER, GAUGE, HISTOGRAM, Exposition, escape

FAMILIES = {"a_total": (COUNTER, "a counter"), "b": (GAUGE, "a gauge"), "h_seconds": (HISTOGRAM, "a histogram")}


def test_text_parses_back_with_escaped_labels() -> None:
    out = Exposition(FAMILIES)
    out.add("a_total", f'sub="{escape(chr(34) + "x" + chr(92) + chr(10))}"', 3)
    out.add("b", 'k="v"', 0.25)
    out.add("a_total", 'sub="plain"', 4)
    out.histogram("h_seconds", 'k="v"', [(0.1, 1), (float("inf"), 2)], 2, 0.3)
    text = out.text()
    assert text.count("# TYPE a_total counter") == 1
    families = {f.name: f for f in text_string_to_metric_families(text)}
    counter = families["a"]  # the parser strips _total from a counter's family name
    assert counter.type == "counter"
    assert [(s.labels["sub"], s.value) for s in counter.samples] == [('"x\\\n', 3.0), ("plain", 4.0)]
    assert families["b"].samples[0].value == 0.25
    h = families["h_seconds"]
    assert h.type == "histogram"
    assert {s.labels.get("le"): s.value for s in h.samples if s.name == "h_seconds_bucket"} == {"0.1": 1, "+Inf": 2}
    assert out.names() == ["a_total", "b", "h_seconds"]


def test_flushed_slices_give_the_same_text() -> None:
    """The writer flushes at every slice of a long scrape: the text is the same as without, the
    lists it appends to keep working, and a family with only its header stays out."""

    def fill(out: Exposition, flush: bool) -> None:
        lines = out.family("b")
        out.family("h_seconds")  # (never gets a sample)
        for i in range(5):
            lines.append(f'b{{k="{i}"}} {i}\n')
            out.add("a_total", f'k="{i}"', i)
            if flush and i % 2:
                out.flush()
                assert lines == []  # the slice's lines are let go; the list stays the writer's

    plain, flushed = Exposition(FAMILIES), Exposition(FAMILIES)
    fill(plain, False)
    fill(flushed, True)
    assert flushed.names() == plain.names() == ["b", "a_total"]
    text = flushed.text()
    assert text == plain.text()
    assert text.count("# HELP b ") == 1 and "h_seconds" not in text
    assert flushed.names() == ["b", "a_total"]  # (still, once the text was given out)
