"""The predicted step as a Chrome trace event file: opens in Perfetto (ui.perfetto.dev) and in the
TensorBoard/XProf trace viewer.

    hlo-analyzer analyze examples.chapter:fsdp_step --mesh X=8 --trace step.json

Format (the Chrome "Trace Event Format"): `{"traceEvents": [...], "displayTimeUnit": "ns"}`. One process (the
step), one thread per track: `compute` (every instruction that takes time, back to back), `compute waits`
(where the compute stream waits for a link), and one per link (`ICI X`, `ICI X,Y`, `DCN data`): its
collectives. Each slice is a complete event (`"ph": "X"`) with `ts` and `dur` in microseconds, named by its
HLO instruction, with the computation, the user's source line and (collectives) the row's notation in `args`.
Metadata events (`"ph": "M"`) name the process and the threads. The durations on each track add up to the
track's busy time in `Report.analysis.step.busy` (the compute track: `Totals.compute_seconds`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.analysis.step import Span
from analyzer.errors import AnalyzerError
from analyzer.hlo.memo import one_call

if TYPE_CHECKING:
    from analyzer.analysis.report import Report

__all__ = ["WAIT_TRACK", "Slice", "check_trace_path", "step_slices", "trace_events", "write_trace"]

WAIT_TRACK = "compute waits"


def check_trace_path(path: str | os.PathLike[str]) -> Path:
    """Say before any compile whether a trace can be written at `path`.

    Raises:
      AnalyzerError: the folder does not exist or is not writable, or the path is a folder.
    """
    from analyzer.fileio import check_writable, is_stream

    if is_stream(path):  # - or /dev/stdout: written to the stream
        return Path(path)
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise AnalyzerError(f"--trace {str(p)!r} is a folder; give a file name such as {str(p / 'step.json')!r}")
    if not folder.is_dir():
        raise AnalyzerError(f"--trace {str(p)!r}: the folder {str(folder)!r} does not exist; create it or write "
                            "the trace elsewhere")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise AnalyzerError(f"--trace {str(p)!r}: the folder {str(folder)!r} is not writable; write the trace "
                            "elsewhere")
    if p.exists() and not os.access(p, os.W_OK):
        raise AnalyzerError(f"--trace {str(p)!r}: the file exists and is read-only")
    return check_writable(p, what="--trace")  # a link to nowhere, a socket; a device or FIFO is written through


@dataclass(frozen=True)
class Slice(Span):
    """One span of the predicted step as renderers show it (the trace here, the HTML timeline plot): the
    step model's `Span` (its waits on the track `compute waits`, `WAIT_TRACK`), with what a person reads.

    Attributes:
      source: the user's `file:line`, "" when unknown; op_name: the jax op name, "" when unknown.
      notation: the collective row's notation, else ""; collective: that row's kind (`all-gather`, ...), else "".
    """

    source: str = ""
    op_name: str = ""
    notation: str = ""
    collective: str = ""

    @property
    def label(self) -> str:
        """The instruction with its source line: `fusion.3 (model.py:41)`."""
        return f"{self.name} ({self.source})" if self.source else self.name


@one_call  # (the spans' metadata decoded once a text: `analyzer.hlo.memo`)
def step_slices(report: Report) -> list[Slice]:
    """Every span of the report's predicted step that takes time, with its source line and collective row.

    Waits of the compute stream go on their own track, `WAIT_TRACK`. Spans are in the order the step model
    recorded them (loops unrolled, up to its `max_spans`).

    Raises:
      AnalyzerError: the report carries no step prediction (a report read back from JSON).
    """
    from analyzer.analysis.mapping import user_frame

    analysis = getattr(report, "analysis", None)
    step = getattr(analysis, "step", None)
    if step is None:
        raise AnalyzerError("this report carries no step prediction (was it read back from JSON?); a trace "
                            "needs a report from analyze() or analyze_hlo()")
    module = getattr(analysis, "module", None)
    frame = report.collectives
    notations = list(frame["notation"]) if frame is not None and "notation" in frame else []
    kinds = list(frame["kind"]) if frame is not None and "kind" in frame else []
    sources: dict[Any, str] = {}
    out: list[Slice] = []
    for s in step.spans:
        if s.seconds <= 0:
            continue
        source = op_name = ""
        inst = s.instruction
        md = inst.metadata if inst is not None and module is not None else None
        if md is not None:
            key = (md.stack_frame_id, md.source_file, md.source_line)
            if key not in sources:
                sources[key] = user_frame(module, md.stack_frame_id, md.source_file, md.source_line)
            source = sources[key]
            op_name = md.op_name or ""
        in_frame = s.row is not None and s.row < len(notations)
        out.append(Slice(
            track=WAIT_TRACK if s.kind == "wait" else s.track, start=s.start, seconds=s.seconds, name=s.name,
            computation=s.computation, kind=s.kind, row=s.row, instruction=inst, source=source, op_name=op_name,
            notation=str(notations[s.row]) if in_frame else "",
            collective=str(kinds[s.row]) if in_frame and s.row < len(kinds) and s.kind != "wait" else ""))
    return out


def trace_events(report: Report) -> dict[str, Any]:
    """The report's predicted step as Chrome trace data (`{"traceEvents": [...]}`).

    Raises:
      AnalyzerError: the report carries no step prediction (a report read back from JSON).

    Example:
        >>> data = trace_events(report)
        >>> sorted(e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name")
        ['ICI X', 'ICI X,Y', 'ICI Y', 'compute', 'compute waits']
    """
    from analyzer.analysis.step import COMPUTE_TRACK

    slices = step_slices(report)
    step = report.analysis.step
    links = sorted({s.track for s in slices if s.track not in (COMPUTE_TRACK, WAIT_TRACK)})
    tids = {COMPUTE_TRACK: 1, WAIT_TRACK: 2, **{t: 3 + k for k, t in enumerate(links)}}
    title = f"{report.name or 'step'}: predicted on {report.hardware} ({report.target})"
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": title}},
    ]
    for track, tid in tids.items():
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": track}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": {"sort_index": tid}})
    for s in slices:
        args: dict[str, Any] = {"computation": s.computation, "kind": s.kind}
        if s.source:
            args["source"] = s.source
        if s.op_name:
            args["op_name"] = s.op_name
        if s.notation:
            args["notation"] = s.notation
        events.append({"name": s.label, "cat": s.kind, "ph": "X", "ts": s.start * 1e6, "dur": s.seconds * 1e6,
                       "pid": 1, "tid": tids[s.track], "args": args})
    other = {"step_seconds": step.step_seconds, "compute_seconds": step.compute_seconds,
             "exposed_comm_seconds": step.exposed_comm_seconds, "hardware": report.hardware,
             "target": report.target, "overlap": step.overlap}
    if getattr(step, "axes_note", None):  # what a track such as `ICI data:(1)2` runs over (theory.notation)
        other["sub_axes"] = step.axes_note
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def write_trace(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write the trace whole or not at all, as every output (`analyzer.fileio.write_atomic`: the old file's
    mode or the umask's, a device or FIFO written through, `-` to standard output).

    Returns:
      The path written.
    Raises:
      AnalyzerError: the path cannot be written, or the report has no step prediction.
    """
    from analyzer.fileio import write_atomic

    p = check_trace_path(path)
    text = json.dumps(trace_events(report), separators=(",", ":"))
    return write_atomic(p, text, what="trace")
