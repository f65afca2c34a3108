"""Ctrl-C latency of `hlo-analyzer sweep`: SIGINT to its process group (what a terminal's Ctrl-C does) DELAY
seconds after the start, while the workers compile; the time until the command exits, its status, whether the
output was written, and the processes of the group still there (a `<defunct>` one has exited: a container's
init may not reap it).

    python scripts/sweep_ctrl_c.py 8 20       # interrupt after 8 s, then in a second run after 20 s
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

root = Path(__file__).resolve().parents[1]
out = Path(tempfile.mkdtemp(prefix="hlo-analyzer-ctrl-c-")) / "ranking.html"
out.unlink(missing_ok=True)
cmd = [sys.executable, "-m", "analyzer", "sweep", str(root / "examples/configs/fsdp-tp-v5e-8.toml"), "-o", str(out),
       "--jobs", "2"]
for delay in map(float, sys.argv[1:] or [8.0]):
    p = subprocess.Popen(cmd, cwd=root, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu"})
    time.sleep(delay)
    children = subprocess.run(["pgrep", "-g", str(p.pid)], capture_output=True, text=True).stdout.split()
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)
    so, se = p.communicate(timeout=120)
    latency = time.monotonic() - t0
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-a", "-g", str(p.pid)], capture_output=True, text=True).stdout.strip().splitlines()
    print(f"after {delay:.0f} s ({len(children)} processes in the group): exit {p.returncode} in {latency:.2f} s, "
          f"left in the group: {left or 'none'}, output written: {out.exists()}, traceback: {'Traceback' in se.decode()}, "
          f"stderr tail: {se.decode().strip().splitlines()[-1:]}", flush=True)
