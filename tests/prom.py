"""A strict reader of the Prometheus text format (0.0.4), for tests of /metrics."""

from __future__ import annotations

import math
import re

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(
    rf"^(?P<name>{_NAME})(?:\{{(?P<labels>(?:[a-zA-Z_][a-zA-Z0-9_]*=\"(?:[^\"\\\n]|\\[\\n\"])*\",?)*)\}})?"
    r" (?P<value>[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|Inf|NaN))$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}

Sample = tuple[str, dict[str, str], float]


def parse(text: str) -> tuple[dict[str, str], list[Sample]]:
    """(types by family, samples). Raises AssertionError on any malformed line."""
    assert text.endswith("\n"), "exposition must end with a newline"
    types: dict[str, str] = {}
    samples: list[Sample] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("# HELP "):
            assert re.match(rf"^# HELP {_NAME} .*$", line), f"line {number}: {line!r}"
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in _TYPES and name not in types, f"line {number}: {line!r}"
            types[name] = kind
        else:
            match = _SAMPLE.match(line)
            assert match, f"line {number} is not a sample: {line!r}"
            labels = dict(_LABEL.findall(match["labels"] or ""))
            samples.append((match["name"], labels, float(match["value"].replace("Inf", "inf"))))
    for name, _labels, _ in samples:
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or family in types, f"sample {name} has no TYPE"
    return types, samples


def value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [
        v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items())
    ]
    assert len(found) == 1, f"{name} {labels}: {found}"
    return found[0]


def check_histograms(types: dict[str, str], samples: list[Sample]) -> None:
    for family, kind in types.items():
        if kind != "histogram":
            continue
        buckets = [(lab, v) for n, lab, v in samples if n == f"{family}_bucket"]
        series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        for lab, v in buckets:
            key = tuple(sorted((k, x) for k, x in lab.items() if k != "le"))
            series.setdefault(key, []).append((float(lab["le"].replace("Inf", "inf")), v))
        for key, points in series.items():
            counts = [v for _, v in sorted(points)]
            assert counts == sorted(counts), f"{family} buckets not cumulative"
            assert sorted(points)[-1][0] == math.inf
            count = value(samples, f"{family}_count", **dict(key))
            assert count == counts[-1]
