"""Reports built by hand for the renderer tests.

The renderers only read a `Report`; these fixtures make one shaped like the analysis of an FSDP+TP
transformer step on a data=4, model=2 mesh (TPU v5e), so the renderers can be tested without compiling.
The figures are internally consistent (total_seconds = seconds * count, totals = sums of rows) but are not
claims about any hardware; tests that check physics live with the cost model and the analysis.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.analysis.report import COLLECTIVE_COLUMNS, DOT_COLUMNS, Report, Totals
from analyzer.theory.mesh import MeshInfo

LAYERS = 4


def _collective(kind, axes, notation, dtype, nbytes, count, seconds, regime, op_name, source, pass_, group, **extra):
    row = {
        "kind": kind,
        "axes": tuple(axes),
        "notation": notation,
        "dtype": dtype,
        "bytes": nbytes,
        "count": count,
        "seconds": seconds,
        "regime": regime,
        "op_name": op_name,
        "source": source,
        "total_seconds": seconds * count,
        "per_device_bytes": nbytes // group,
        "group_size": group,
        "num_groups": 8 // group,
        "sync": True,
        "overlapped": False,
        "permute_steps": 0,
        "pass_": pass_,
        "computation": extra.pop("computation", "region_body.1"),
        "instruction": extra.pop("instruction", "all-gather.3"),
        "hlo_line": extra.pop("hlo_line", 120),
        "hops": group - 1,
        "formula": "V / W_ici (ring, no wraparound)",
        "original_ops": extra.pop("original_ops", ""),
        "op": op_name.rsplit("/", 1)[-1],
        "global_shape": (),
        "branch": "",
        # FSDP gathers and scatters hide behind the matmuls; the activation collectives wait on the data path.
        "exposed_seconds": 0.0 if kind in ("all-gather", "reduce-scatter") else seconds * count,
    }
    row.update(extra)
    return row


def make_report(*, with_findings: bool = True, name: str = "fsdp+tp step (hand-built)") -> Report:
    """A realistic hand-built report: FSDP over `data`, tensor parallel over `model`."""
    rows = [
        _collective(
            "all-gather",
            ["data"],
            "AllGather_data: [D_data, F_model] -> [D, F_model]",
            "bf16",
            2 * 4096 * 8192,
            LAYERS,
            3.1e-4,
            "bandwidth",
            "jit(step)/mlp/dot_general",
            "model.py:41",
            "forward",
            4,
            instruction="all-gather.3",
        ),
        _collective(
            "reduce-scatter",
            ["data"],
            "ReduceScatter_data,D: [D, F_model]{U_data} -> [D_data, F_model]",
            "f32",
            4 * 4096 * 8192,
            LAYERS,
            6.2e-4,
            "bandwidth",
            "jit(step)/transpose(jvp(mlp))/dot_general",
            "model.py:41",
            "backward",
            4,
            original_ops="all-reduce + dynamic-slice",
            instruction="all-reduce.7",
            computation="region_body.2",
        ),
        _collective(
            "all-reduce",
            ["model"],
            "AllReduce_model: [B_data, S, D]{U_model} -> [B_data, S, D]",
            "bf16",
            2 * 8 * 1024 * 4096,
            LAYERS,
            1.5e-3,
            "bandwidth",
            "jit(step)/attn/out_proj/dot_general",
            "model.py:58",
            "forward",
            2,
            instruction="all-reduce.2",
        ),
        _collective(
            "all-to-all",
            ["data"],
            "AllToAll_data: [E_data, T, D] -> [E, T_data, D]",
            "bf16",
            2 * 8 * 512 * 4096,
            LAYERS,
            2.0e-4,
            "bandwidth",
            "jit(step)/moe/dispatch",
            "model.py:77",
            "forward",
            4,
            instruction="all-to-all.1",
        ),
        _collective(
            "all-reduce",
            ["data", "model"],
            "AllReduce_data,model: []{U_data,model} -> []",
            "f32",
            4,
            1,
            3.0e-6,
            "latency",
            "jit(step)/loss/psum",
            "train.py:12",
            "",
            8,
            computation="main.42",
            instruction="all-reduce.9",
            hlo_line=300,
        ),
    ]
    collectives = pd.DataFrame(rows, columns=list(COLLECTIVE_COLUMNS))

    def dot(name, op_name, flops, seconds, notation, count=LAYERS, computation="region_body.1"):
        return {
            "instruction": name,
            "computation": computation,
            "op_name": op_name,
            "source": "model.py:41",
            "flops": flops,
            "count": count,
            "seconds": seconds,
            "lhs_shape": "bf16[2,1024,4096]",
            "rhs_shape": "bf16[4096,4096]",
            "out_shape": "bf16[2,1024,4096]",
            "contracting": "D",
            "notation": notation,
            "dtype": "bf16",
            # like this report's collectives (hand-set passes: its op_names carry no jvp())
            "pass_": "backward" if "transpose(" in op_name else "forward",
        }

    mlp_flops = 2 * 8 * 1024 * 4096 * 8192 / 8
    dots = pd.DataFrame(
        [
            dot(
                "dot.1",
                "jit(step)/mlp/dot_general",
                mlp_flops,
                1.1e-3,
                "[B_data, S, D] x [D, F_model] -> [B_data, S, F_model]",
            ),
            dot(
                "dot.2",
                "jit(step)/attn/out_proj/dot_general",
                mlp_flops / 2,
                5.5e-4,
                "[B_data, S, H_model] x [H_model, D] -> [B_data, S, D]{U_model}",
            ),
            dot(
                "dot.3",
                "jit(step)/transpose(jvp(mlp))/dot_general",
                2 * mlp_flops,
                2.2e-3,
                "[B_data, S, F_model] x [B_data, S, D] -> [D, F_model]{U_data}",
                computation="region_body.2",
            ),
            dot(
                "dot.4",
                "jit(step)/head/dot_general",
                mlp_flops / 4,
                2.7e-4,
                "[B_data, S, D] x [D, V] -> [B_data, S, V]",
                count=1,
                computation="main.42",
            ),
        ],
        columns=list(DOT_COLUMNS),
    )
    by_kind: dict[str, float] = {}
    by_axis: dict[str, float] = {}
    for r in rows:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0.0) + r["total_seconds"]
        key = ",".join(r["axes"])
        by_axis[key] = by_axis.get(key, 0.0) + r["total_seconds"]
    comm = sum(r["total_seconds"] for r in rows)
    compute = float((dots["seconds"] * dots["count"]).sum())
    totals = Totals(
        comm_seconds=comm,
        compute_seconds=compute,
        by_kind=by_kind,
        by_axis=by_axis,
        comm_bytes=sum(r["bytes"] * r["count"] for r in rows),
        flops=float((dots["flops"] * dots["count"]).sum()),
        step_seconds=compute + sum(r["exposed_seconds"] for r in rows),
        exposed_comm_seconds=sum(r["exposed_seconds"] for r in rows),
        exposed_by_axis={k: sum(r["exposed_seconds"] for r in rows if ",".join(r["axes"]) == k) for k in by_axis},
        matmul_seconds=compute,
        model_flops=8 * float((dots["flops"] * dots["count"]).sum()),
        mfu=float((dots["flops"] * dots["count"]).sum()) / ((compute + sum(r["exposed_seconds"] for r in rows))
                                                             * 1.97e14),
        hfu=float((dots["flops"] * dots["count"]).sum()) / ((compute + sum(r["exposed_seconds"] for r in rows))
                                                             * 1.97e14),
    )
    diagnostics = []
    if with_findings:
        diagnostics = [
            Diagnostic(
                code="HA103",
                name="all-reduce-where-reduce-scatter-suffices",
                message="The gradient all-reduce over `data` is only used sharded; a reduce-scatter moves half the bytes.",
                severity=Severity.WARNING,
                location=Location(
                    file="model.py", line=41, computation="region_body.1", instruction="all-reduce.7", hlo_line=188
                ),
                notation="AllReduce_data: [D, F_model]{U_data} -> [D, F_model]",
                seconds=1.24e-3,
                alternative="ReduceScatter_data: [D, F_model]{U_data} -> [D_data, F_model]",
                alternative_seconds=6.2e-4,
                saving_seconds=6.2e-4 * LAYERS,
                fix="out_shardings=P('data', 'model') for the gradient",
            ),
            Diagnostic(
                code="HA106",
                name="missing-wraparound",
                message="Mesh axis `data` (4) lies on a v5e ring of 4 without wraparound; collectives over it pay about 2x.",
                severity=Severity.ERROR,
                location=Location(),
                seconds=2.5e-3,
                alternative="lay `data` on an axis of 16",
                alternative_seconds=1.25e-3,
                saving_seconds=1.25e-3,
                fix="topology = 'v5e:16x16' or a mesh axis of 16",
            ),
            Diagnostic(
                code="HA105",
                name="latency-bound-collectives",
                message="1 collective per step moves under 45 kB per hop <script>alert(1)</script>.",
                severity=Severity.INFO,
                location=Location(file="train.py", line=12),
                notation="AllReduce_data,model: []{U_data,model} -> []",
                seconds=3.0e-6,
            ),
        ]
    return Report(
        collectives=collectives,
        dots=dots,
        totals=totals,
        hlo=None,
        mesh=MeshInfo(
            axis_names=("data", "model"), axis_sizes=(4, 2), device_ids=tuple(range(8)), axis_types=("Auto", "Auto")
        ),
        hardware="tpu-v5e",
        topology="v5e:4x2, data->x (ring 4, no wraparound), model->y (ring 2, no wraparound)",
        target="cpu",
        diagnostics=tuple(diagnostics),
        notes=(
            "The cpu target has no physical topology; the mesh was laid on v5e:4x2, axes in order.",
            "bf16 all-reduces are priced at bf16 although the CPU backend promotes them to f32.",
        ),
        memory={
            "argument_bytes": 1_200_000_000,
            "output_bytes": 1_200_000_000,
            "temp_bytes": 3_400_000_000,
            "total_bytes": 5_800_000_000,
        },
        name=name,
    )


@pytest.fixture
def report() -> Report:
    return make_report()


@pytest.fixture
def clean_report() -> Report:
    return make_report(with_findings=False, name="clean")


@pytest.fixture
def empty_report() -> Report:
    """A program with no collectives at all (everything replicated or a single device)."""
    return Report(
        collectives=pd.DataFrame(columns=list(COLLECTIVE_COLUMNS)),
        dots=pd.DataFrame(columns=list(DOT_COLUMNS)),
        totals=Totals(comm_seconds=0.0, compute_seconds=0.0),
        hlo=None,
        mesh=None,
        hardware="tpu-v5e",
        topology="",
        target="dump",
        name="empty",
    )


# ------------------------------------------------------------------------------------ one headless Chromium

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class Chromium:
    """One headless Chromium for the session, driven over the DevTools protocol on a pipe
    (`--remote-debugging-pipe`: commands on its fd 3, replies on its fd 4, each a JSON message ended by NUL).
    Each `load` opens the page in a tab of its own and closes it after; starting the browser once, not twice per
    page, is what made the Chromium tests cheap."""

    TIMEOUT = 120.0

    def __init__(self, path: str, profile: Path):
        import fcntl

        to_browser, from_us = os.pipe()
        to_us, from_browser = os.pipe()
        # Above 9 in this process, so that the shell's `3<&N 4>&M` cannot clobber one with the other.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
        os.close(to_browser)
        os.close(from_browser)
        cmd = [path, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
               "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
               "--force-device-scale-factor=1", "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{high[0]} 4>&{high[1]} {high[0]}<&- {high[1]}>&-', *cmd],
            pass_fds=tuple(high), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        for fd in high:
            os.close(fd)
        self._out, self._in = from_us, to_us
        self._buffer = b""
        self._id = 0
        self._events: list[dict] = []

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self._in], [], [], left)[0], "Chromium stopped answering"
            chunk = os.read(self._in, 1 << 20)
            assert chunk, f"Chromium exited (status {self.proc.poll()})"
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.TIMEOUT
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply.get("result", {})
            self._events.append(reply)

    def _wait_for(self, method: str, session: str) -> dict:
        deadline = time.monotonic() + self.TIMEOUT
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self._events.pop(i)
            self._events.append(self._message(deadline))

    def load(self, page: Path, script: str, *, width: int, height: int = 1000, screenshot: Path | None = None):
        """Open `page` in a new tab at `width` x `height` CSS pixels; then evaluate `script` (an expression whose
        value is JSON text) in it. With `screenshot`, the viewport is made as tall as the page plus 40 px (the
        script's value must hold the page's `height`), `script` is evaluated again at that size, and the whole
        page is written there as PNG. Returns the script's last value and the tab's console messages (console
        calls, uncaught exceptions, failed loads: none are expected from the report's pages)."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable", session)
            self.send("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                      deviceScaleFactor=1, mobile=False)
            self.send("Page.navigate", session, url=page.as_uri())
            self._wait_for("Page.loadEventFired", session)

            def evaluate() -> dict:
                result = self.send("Runtime.evaluate", session, expression=script, returnByValue=True)
                assert "exceptionDetails" not in result, result["exceptionDetails"]
                return json.loads(result["result"]["value"])

            value = evaluate()
            if screenshot is not None:
                self.send("Emulation.setDeviceMetricsOverride", session, width=width,
                          height=int(value["height"]) + 40, deviceScaleFactor=1, mobile=False)
                value = evaluate()
                shot = self.send("Page.captureScreenshot", session, format="png")
                screenshot.write_bytes(base64.b64decode(shot["data"]))
            console = [json.dumps(e["params"])[:400] for e in self._events if e.get("sessionId") == session
                       and e.get("method") in ("Runtime.consoleAPICalled", "Runtime.exceptionThrown",
                                               "Log.entryAdded")]
            return value, console
        finally:
            self.send("Target.closeTarget", targetId=target)
            self._events = [e for e in self._events if e.get("sessionId") != session]

    def close(self) -> None:
        try:
            os.write(self._out, json.dumps({"id": self._id + 1, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        finally:
            os.close(self._out)
            os.close(self._in)


@pytest.fixture(scope="session")
def chromium(tmp_path_factory) -> Chromium:
    """The session's headless Chromium; the test skips, saying how to install it, when there is none."""
    path = next((shutil.which(n) for n in CHROMIUM_CANDIDATES if shutil.which(n)), None)
    if path is None:
        pytest.skip("no Chromium found (looked for chromium, chromium-browser, google-chrome); on Debian: "
                    "apt-get install -y chromium")
    browser = Chromium(path, tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.close()
