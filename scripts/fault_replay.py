"""Replay issue 12's command-line cases as a new user would, each in a fresh process, and count them.

Each case is bad input, an unwritable output or misbehaving user code; it passes ("clean") when the exit status
is the documented one, stderr has no traceback, it ends within 60 s, and no file in the scratch folder was
changed or left behind. tests/workflow/test_faults.py holds the same cases as fast in-process tests; this
script is the end-to-end count quoted in the issue's notes.

    python scripts/fault_replay.py          # one line per case, then the totals
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
W = Path(tempfile.mkdtemp(prefix="hlo-analyzer-faults-"))
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
FIX = ROOT / "fixtures/cpu/X2_Y4/matmul_case3.spmd.hlo"
EX = ROOT / "examples/configs/fsdp-tp-v5e-8.toml"
spec = (ROOT / "analyzer/_data/hardware/tpu-v5e.toml").read_text()
(W / "zero.toml").write_text(spec.replace("links_per_axis = 2", "links_per_axis = 0"))
(W / "latin.toml").write_bytes(b'name = "caf\xe9"\n')
(W / "bad.json").write_bytes(b"\xff\xfe{")
ok = subprocess.run([sys.executable, "-m", "analyzer", "inspect", str(FIX), "--mesh", "X=2,Y=4", "--json"],
                    capture_output=True, text=True, env=ENV).stdout
(W / "ok.json").write_text(ok)
for field, value in (("bytes", "lots"), ("count", -2), ("axes", "X"), ("seconds", "1ms"), ("kind", 3)):
    d = json.loads(ok); d["collectives"][0][field] = value
    (W / f"row-{field}.json").write_text(json.dumps(d))
(W / "synerr.py").write_text("def f(mesh)\n    return 1\n")
(W / "nameerr.py").write_text("x = undefined + 1\n")
(W / "latin.py").write_bytes(b"def f(mesh):\n    return 'caf\xe9'\n")
(W / "u.py").write_text("import sys, time\ndef ret(mesh):\n    return (lambda x: x, (), [1, 2])\n"
                        "def boom(mesh):\n    raise ValueError('bug')\ndef quit(mesh):\n    sys.exit(3)\n"
                        "def hang(mesh):\n    while True:\n        time.sleep(0.01)\n")
(W / "ro").mkdir(); (W / "out.html").mkdir(); (W / "file").write_text("")
(W / "baseline.json").write_bytes(b"\xff{")
for name, edit in (("mesh16", ("data = 4", "data = 8")), ("batch7", ("batch = 8", "batch = 7")),
                   ("hw", ('hardware = "tpu-v5e"', 'hardware = "tpu-v9"')), ("topo", ('topology = "v5e:2x4"', 'topology = "v5e:3x3"'))):
    (W / f"{name}.toml").write_text(EX.read_text().replace(*edit))
(W / "mesh-shape.toml").write_text(EX.read_text())
A = [sys.executable, "-m", "analyzer"]
cases = [
    ("price", ["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=100000000,Y=4", "--dims", "E=8,F=8"], {2}),
    ("price", ["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=10**30,F=8"], {2}),
    ("price", ["price", "RaggedAllToAll_X: [I_X, J] -> [I, J_X]", "--mesh", "X=8", "--dims", "I=64,J=64", "--top-k", "-3"], {2}),
    ("price", ["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=64,F=8", "--hardware", str(W / "zero.toml")], {2}),
    ("price", ["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=64,F=8", "--hardware", str(W / "latin.toml")], {2}),
    ("price", ["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=64,F=8"], {0}),
    ("inspect", ["inspect", str(FIX), "--mesh", "X=4,Y=2"], {0}),
    ("inspect", ["inspect", str(FIX), "--mesh", "X=1,Y=8"], {0}),
    ("inspect", ["inspect", str(FIX), "--mesh", "X=3"], {2}),
    ("inspect", ["inspect", str(W / "bad.json")], {2}),
    ("diff", ["diff", str(W / "bad.json"), str(W / "ok.json")], {2}),
    ("diff", ["diff", str(W / "latin.toml"), str(W / "ok.json")], {2}),
    ("diff", ["diff", "HEAD:/etc/passwd", "pyproject.toml"], {2}),
    ("diff", ["diff", "HEAD:README.md", "pyproject.toml"], {2}),
    *[("diff", ["diff", str(W / f"row-{f}.json"), str(W / "ok.json")], {2}) for f in ("bytes", "count", "axes", "seconds", "kind")],
    ("diff", ["diff", str(W / "ok.json"), str(W / "ok.json")], {0}),
    *[("analyze", ["analyze", f"{W}/{e}", "--mesh", "X=2"], {2}) for e in ("synerr.py:f", "nameerr.py:f", "latin.py:f", "u.py:ret", "u.py:boom", "u.py:quit")],
    ("analyze", ["analyze", f"{W}/u.py:hang", "--mesh", "X=2", "--timeout", "2"], {2}),
    ("analyze", ["analyze", f"{W}/u.py:ret", "--mesh", "X=2", "--timeout", "-1"], {2}),
    *[("report", ["report", str(W / f"{n}.toml"), "-o", str(W / f"{n}.json")], {2}) for n in ("mesh16", "batch7", "hw", "topo")],
    ("report", ["report", str(EX), "-o", str(W / "out.html")], {2}),
    ("report", ["report", str(EX), "-o", str(W / "file" / "r.json")], {2}),
    ("report", ["report", str(W / "latin.toml")], {2}),
    ("sweep", ["sweep", str(W / "missing.toml")], {2}),
    ("sweep", ["sweep", str(EX), "-o", str(W / "out.html")], {2}),
    ("check", ["check", "nope.py"], {2}),
    ("check", ["check", "--baseline", str(W / "baseline.json")], {2}),
    ("hardware", ["hardware", "show", str(W / "zero.toml")], {2}),
    ("hardware", ["hardware", "show", "tpu-v9"], {2}),
    ("rules", ["rules", "HA999"], {2}),
    ("parse", ["parse", str(W / "bad.json")], {2}),
    ("demo", ["demo", "-o", str(W / "out.html")], {2}),
]
n = clean = tb = wrong = slow = 0
touched = 0
for cmd, argv, want in cases:
    before = {p: p.read_bytes() for p in W.rglob("*") if p.is_file()}
    t = time.monotonic()
    try:
        r = subprocess.run(A + argv, cwd=ROOT, capture_output=True, text=True, env=ENV, timeout=120)
        code, err = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        code, err = None, "TIMEOUT"
    dt = time.monotonic() - t
    n += 1
    after = {p: p.read_bytes() for p in W.rglob("*") if p.is_file()}
    changed = [str(p) for p in before if after.get(p) != before[p]]
    stray = [str(p) for p in after if p not in before]
    bad = []
    if "Traceback" in err:
        tb += 1
        bad.append("traceback")
    if code not in want:
        wrong += 1
        bad.append(f"exit {code}")
    if code is None or dt > 60:
        slow += 1
        bad.append("hang")
    if changed or stray:
        touched += 1
        bad.append(f"files {changed + stray}")
    clean += not bad
    last = [l for l in err.strip().splitlines() if l.startswith("hlo-analyzer")][-1:] or err.strip().splitlines()[-1:]
    print(f"{'ok ' if not bad else 'BAD'} {dt:5.1f}s exit {code} {cmd:8s} {' '.join(argv)[:70]} -> {(last or [''])[0][:150]} {bad or ''}", flush=True)
print(f"cases {n}, clean {clean}, tracebacks {tb}, wrong exit status {wrong}, hangs {slow}, "
      f"files changed or left behind {touched}")
sys.exit(0 if clean == n else 1)
