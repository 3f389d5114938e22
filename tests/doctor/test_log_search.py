"""The keyword search that makes a long training log fast finds what a line-by-line scan finds.

Every event pattern and every shape pattern needs a word (``_EVENT_KEYWORDS``,
``_SHAPE_KEYWORDS``): a pattern added without one would silently never match a long log, so
each pattern's matches are generated and checked for its words, and the fast scan is compared
with the plain one on logs made of real and random lines.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudalock.doctor import logs
from cudalock.doctor.logs import (
    _EVENT_KEYWORDS,
    _EVENT_PATTERNS,
    _SHAPE_KEYWORDS,
    MAX_EVENTS_PER_KIND,
    LogEvent,
    _classify,
    _shape,
    scan_training_log,
)

SLOW = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def test_every_event_kind_has_its_words() -> None:
    assert {kind for kind, _pattern in _EVENT_PATTERNS} == set(_EVENT_KEYWORDS)


@SLOW
@given(st.data())
def test_every_event_match_holds_a_word_of_its_kind(data: st.DataObject) -> None:
    kind, pattern = data.draw(st.sampled_from(_EVENT_PATTERNS))
    line = data.draw(st.from_regex(pattern, fullmatch=False))
    match = pattern.search(line)
    assert match is not None
    assert any(word in line for word in _EVENT_KEYWORDS[kind]), (kind, line)


SHAPE_PATTERNS = [
    value
    for name, value in vars(logs).items()
    if isinstance(value, re.Pattern)
    and name
    in (
        "_CONFIG_PATH",
        "_OFFLOAD_OPTIMIZER",
        "_OFFLOAD_PARAM",
        "_GATHER",
        "_NPROC",
        "_NNODES",
        "_WORLD_INFO",
        "_ALL_PARAMS",
        "_TRAINABLE",
        "_MODEL_ARG",
    )
] + list(logs._STAGE)


@SLOW
@given(st.data())
def test_every_shape_match_holds_a_shape_word(data: st.DataObject) -> None:
    pattern = data.draw(st.sampled_from(SHAPE_PATTERNS))
    text = data.draw(st.from_regex(pattern, fullmatch=True))
    assert isinstance(text, str)
    assert any(word in text.lower() for word in _SHAPE_KEYWORDS), (pattern.pattern, text)


def plain_events(text: str) -> list[LogEvent]:
    """The scan before the keyword search: every line through every pattern, in order."""
    events: list[LogEvent] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        found = _classify(raw)
        if found is not None:
            kind, line, sig, pid = found
            events.append(LogEvent(kind, number, line, sig, pid))
    counts: dict[str, int] = {}
    kept = []
    for event in reversed(events):
        counts[event.kind] = counts.get(event.kind, 0) + 1
        if counts[event.kind] <= MAX_EVENTS_PER_KIND:
            kept.append(event)
    return kept[::-1]


REAL_LINES = [
    "[2024-05-01 10:00:00] launch.py: WORLD INFO DICT: {'node1': [0, 1, 2, 3]}",
    "  exitcode  : -9 (pid: 4242)",
    "[E ProcessGroupNCCL.cpp:475] Watchdog caught collective operation timeout",
    "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "{'loss': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1}",
    "Saving model checkpoint to /out/checkpoint-500",
    "RuntimeError: DataLoader worker (pid 77) is killed by signal: Killed.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1.batch",
    "[rank0]: exits with return code = -11",
    "train.sh: line 12: 4242 Killed                  python train.py",
    "Segmentation fault (core dumped)",
    "Bus error",
    '    "zero_optimization": {',
    '        "stage": 3,',
    '        "offload_optimizer": {"device": "cpu"},',
    "    },",
    "deepspeed --num_gpus 8 train.py --deepspeed ds.json --model_name_or_path meta/Llama-2-7b",
    "all params: 6,738,415,616",
    "step 12 lr 0.0001\rloss=0.25",
    "plain line with nothing in it",
    "",
]


@SLOW
@given(st.lists(st.one_of(st.sampled_from(REAL_LINES), st.text(max_size=60)), max_size=300))
def test_the_fast_scan_finds_what_the_plain_scan_finds(lines: list[str]) -> None:
    text = "\n".join(lines)
    facts = scan_training_log(text)
    assert list(facts.events) == plain_events(text)
    assert facts.shape == _shape(text)


def test_only_the_newest_events_of_a_kind_are_kept() -> None:
    text = "\n".join(f"{{'loss': {n}}}" for n in range(3 * MAX_EVENTS_PER_KIND))
    events = scan_training_log(text).events
    assert len(events) == MAX_EVENTS_PER_KIND
    assert events[-1].line_no == 3 * MAX_EVENTS_PER_KIND and events[-1].line.endswith(
        f"{3 * MAX_EVENTS_PER_KIND - 1}}}"
    )
