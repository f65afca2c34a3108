"""What the parser and the analysis remember of a program lives as long as the call (analyzer/hlo/memo.py): the
library keeps nothing of a user's program in the host process once the report is dropped."""

from __future__ import annotations

import gc
import threading
import tracemalloc
import weakref

from analyzer import analyze_hlo
from analyzer.hlo import memo
from analyzer.hlo.parser import parse_hlo


def _module(tag: str, n: int = 2000) -> str:
    """n broadcasts, each with its own shape and metadata (source file, op name): texts only this program has."""
    lines = "\n".join(
        f'  %a.{k} = f32[8,{k % 97 + 1}]{{1,0}} broadcast(%p), dimensions={{0}}, '
        f'metadata={{op_name="{tag}/op{k}" source_file="/src/{tag}_{k}.py" source_line={k}}}' for k in range(n))
    return (f"HloModule m_{tag}\nENTRY %e (p: f32[8]) -> f32[8] {{\n  %p = f32[8]{{0}} parameter(0)\n{lines}\n"
            f"  ROOT %r = f32[8]{{0}} negate(%p)\n}}\n")


def test_an_analysis_keeps_nothing_of_the_program_once_its_report_is_dropped():
    """Memory the analysis still holds after its report is dropped, against the program's text: before the memos
    were the call's (bounded module-level caches of shapes, metadata and values found valid) 1.31 MB stayed for this
    0.28 MB program (4.7x its text); now 0.01 MB (the first call warms what every call shares: the grammar, imports)."""
    analyze_hlo(_module("warm"), hardware="tpu-v5e")
    gc.collect()
    text = _module("user")
    tracemalloc.start()
    try:
        report = analyze_hlo(text, hardware="tpu-v5e")
        del report
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 0.1 * len(text), f"{held} bytes held after the report was dropped ({held / len(text):.2f}x the text)"


def test_one_call_shares_one_set_of_memos_and_drops_it(monkeypatch):
    """The parse, the analysis and the rules of one `analyze_hlo` share one set of memos (shapes, metadata and
    the values found valid among them), and it is gone when the call returns."""
    made: list[weakref.ref] = []
    used: set[str] = set()

    class Recorded(memo._Memos):
        __slots__ = ("__weakref__",)

        def __init__(self) -> None:
            super().__init__()
            made.append(weakref.ref(self))

        def __missing__(self, decoder):
            used.add(decoder.__name__)
            return super().__missing__(decoder)

    monkeypatch.setattr(memo, "_Memos", Recorded)
    report = analyze_hlo(_module("shared", 50), hardware="tpu-v5e")
    assert len(made) == 1
    assert {"decode_shape", "parse_metadata"} <= used, used
    assert made[0]() is None and memo._MEMOS.get() is None
    assert len(report.analysis.module.entry.instructions) == 52  # (the report keeps its module, not the memos)


def test_a_module_read_after_its_parse_decodes_alike_without_memos():
    """A lazily parsed module read after `parse_hlo` returned (no call open) gives what it gives inside one."""
    text = _module("late", 20)
    inside = None
    with memo.scope():
        m = parse_hlo(text, lazy=True)
        inside = [(i.name, i.shape, i.metadata) for i in m.entry.instructions]
    late = parse_hlo(text, lazy=True)
    assert [(i.name, i.shape, i.metadata) for i in late.entry.instructions] == inside


def test_each_thread_has_its_own_memos():
    def seen() -> set:
        return set()

    got: dict[str, set] = {}

    def run(name: str) -> None:
        with memo.scope():
            state = memo.state(seen)
            state.add(name)
            barrier.wait()  # both threads inside their calls at once
            got[name] = set(state)

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {"a": {"a"}, "b": {"b"}}
