"""Replay issue 12's and issue 27's command-line cases as a new user would, each in a fresh process, and count them.

Each case is bad input, an unwritable output or misbehaving user code; it passes ("clean") when the exit status
is the documented one, stderr has no traceback, it ends within 60 s, and no file in the scratch folder was
changed or left behind. tests/workflow/test_faults.py holds the same cases as fast in-process tests; this
script is the end-to-end count quoted in the issue's notes.

    python scripts/fault_replay.py          # one line per case, then the totals
    FAULT_REPLAY_TIMEOUT=20 python scripts/fault_replay.py   # on a tree that still reads /dev/zero to the end

Issue 27's cases (outputs over inputs or devices, git revisions as options, NaN and friends, non-regular
inputs, SIGTERM/SIGHUP, control characters in check's and diff's text) are counted too: a number case that exits 0 is "NaN accepted"; a device or FIFO
output that is no longer one is a file replaced; the signal cases run with a private TMPDIR and count
temporary folders left and processes that outlive the command (orphans).
"""

import json
import os
import signal
import stat
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
# ---- issue 27: a project whose inputs must never be replaced, a git repository, numbers, devices
P = W / "proj"
(P / "model").mkdir(parents=True)
(P / "model" / "__init__.py").write_text("")
(P / "model" / "train.py").write_text("def step(mesh):\n    return print, ()\n")
(P / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.hlo-analyzer]\nentry-points = ["model.train:step"]\n'
                                  'mesh = { X = 2 }\n')
(P / "notbaseline.json").write_text('{"a": 1}\n')
P2 = W / "proj-nan"
P2.mkdir()
(P2 / "pyproject.toml").write_text((P / "pyproject.toml").read_text() + "baseline-tolerance = nan\n")
(W / "precious.txt").write_text("keep\n")
G = W / "repo"
(G / "sub").mkdir(parents=True)
(G / "pyproject.toml").write_text('[tool.hlo-analyzer]\nentry-points = []\nmesh = { X = 2 }\n')
(G / "link").symlink_to("/etc/hostname")
(G / "up").symlink_to("../../outside")
GIT = ["git", "-c", "user.name=r", "-c", "user.email=r@r", "-C", str(G)]
for argv in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "init"]):
    subprocess.run(GIT + argv, check=True, capture_output=True)
(W / "tmp").mkdir()
(W / "tmp" / "x.toml").write_text("[tool.hlo-analyzer]\nentry-points = ['planted:f']\n")
for name, key, value in (("nan", "link_bandwidth_one_way", "nan"), ("denormal", "link_bandwidth_one_way", "1e-320"),
                         ("inf", "hop_latency", "inf")):
    lines = [f"{key} = {value}" if line.startswith(f"{key} =") else line for line in spec.splitlines()]
    (W / f"hw-{name}.toml").write_text("\n".join(lines) + "\n")
for name, value in (("nan", "NaN"), ("inf", "Infinity"), ("big", "1e999")):
    (W / f"row-{name}.json").write_text(ok.replace('"seconds": ', f'"seconds": {value}, "x": ', 1))
(W / "huge.hlo").write_text('HloModule m\n\nENTRY e {\n  p = f32[] parameter(0), metadata={op_name="' + "x" * 5_000_000
                            + '" @}\n}\n')  # a syntax error on a 5 MB line: the message must stay short
os.mkfifo(W / "fifo.hlo")
# ---- issue 27's last cases: report/sweep outputs over their inputs, rule options, control characters in text
R = W / "rep"
R.mkdir()
(R / "m.py").write_text("def step(mesh):\n    raise SystemExit('compiled')\n")
(R / "plan.toml").write_text('name = "t"\nentry = "m.py:step"\n[mesh]\nX = 2\n')
(R / "cfg.md").symlink_to("plan.toml")  # report paths whose file is an input
(R / "src.md").symlink_to("m.py")
(R / "hw.toml").write_text(spec)
(R / "hw.json").symlink_to("hw.toml")
for name, value in (("nan", "nan"), ("inf", "inf"), ("denormal", "1e-320")):
    Q = W / f"proj-rule-{name}"
    Q.mkdir()
    (Q / "pyproject.toml").write_text((P / "pyproject.toml").read_text()
                                      + f"\n[tool.hlo-analyzer.rules.HA201]\nmin-fraction = {value}\n")
    (W / f"rule-{name}.toml").write_text(EX.read_text() + f"\n[rules.HA201]\nmin-fraction = {value}\n")
E = W / "esc"
E.mkdir()
(E / "m.py").write_text('def step(mesh):\n    raise ValueError("\\x1b[2Jcleared\\u202e")\n')
(E / "pyproject.toml").write_text('[tool.hlo-analyzer]\nentry-points = ["m:step"]\nmesh = { X = 2 }\ncache = false\n')
d = json.loads(ok)
d["collectives"][0].update(source="\x1b[2Jevil\u202e.py:3", bytes=d["collectives"][0]["bytes"] * 2)
(W / "row-esc.json").write_text(json.dumps(d))
DEVICE = None
if os.geteuid() == 0:  # a /dev/null of our own (never the real one)
    DEVICE = W / "null"
    os.mknod(DEVICE, 0o666 | stat.S_IFCHR, os.makedev(1, 3))

A = [sys.executable, "-m", "analyzer"]
LIMIT = float(os.environ.get("FAULT_REPLAY_TIMEOUT", "120"))  # seconds a case may run (20 keeps /dev/zero's read small)
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
    # issue 27: outputs
    ("check", ["check", "-o", "pyproject.toml"], {2}, P),
    ("check", ["check", "-o", "model/train.py"], {2}, P),
    ("check", ["check", "--write-baseline", "--baseline", "pyproject.toml"], {2}, P),
    ("check", ["check", "--write-baseline", "--baseline", "notbaseline.json"], {2}, P),
    # issue 27: git revisions
    ("diff", ["diff", "--", "--output=../precious.txt:pyproject.toml", "pyproject.toml"], {2}, G),
    ("diff", ["diff", "--", "--list:pyproject.toml", "pyproject.toml"], {2}, G),
    ("diff", ["diff", "HEAD:../x.toml", "../pyproject.toml"], {2}, G / "sub"),
    ("diff", ["diff", "HEAD:pyproject.toml", "pyproject.toml"], {2}, G),
    # issue 27: numbers (a 0 exit is a NaN accepted)
    ("check", ["check", "--baseline-tolerance", "nan"], {2}, P, "nan"),
    ("check", ["check"], {2}, P2, "nan"),
    *[("price", ["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=64,F=8", "--hardware",
                 str(W / f"hw-{n}.toml")], {2}, ROOT, "nan") for n in ("nan", "denormal", "inf")],
    *[("diff", ["diff", str(W / "ok.json"), str(W / f"row-{n}.json"), "--max-regression", "5%"], {2}, ROOT, "nan")
      for n in ("nan", "inf", "big")],
    ("diff", ["diff", str(W / "ok.json"), str(W / "ok.json"), "--max-regression", "1e999%"], {2}, ROOT, "nan"),
    # issue 27: inputs that are not regular files, a 5 MB line
    ("inspect", ["inspect", str(W / "fifo.hlo")], {2}),
    ("inspect", ["inspect", "/dev/zero"], {2}),
    ("inspect", ["inspect", str(W / "huge.hlo")], {2}),
    # issue 27: report and sweep outputs that are their inputs (config, entry source, hardware spec)
    *[(c, [c, "plan.toml", "-o", o], {2}, R) for c in ("report", "sweep") for o in ("cfg.md", "src.md")],
    ("report", ["report", "plan.toml", "--hardware", "./hw.toml", "-o", "hw.json"], {2}, R),
    ("report", ["report", "plan.toml", "--trace", "plan.toml"], {2}, R),
    # issue 27: NaN, infinities and denormals in per-rule options (pyproject and report config)
    *[("check", ["check"], {2}, W / f"proj-rule-{n}", "nan") for n in ("nan", "inf", "denormal")],
    *[("report", ["report", str(W / f"rule-{n}.toml")], {2}, ROOT, "nan") for n in ("nan", "inf", "denormal")],
    # issue 27: control characters from user strings never reach the terminal raw (check's and diff's text)
    ("check", ["check"], {2}, E, "esc"),
    ("diff", ["diff", str(W / "ok.json"), str(W / "row-esc.json")], {0}, ROOT, "esc"),
    # issue 27: outputs that are devices or FIFOs are written through
    *([("inspect", ["inspect", str(FIX), "--mesh", "X=2,Y=4", "--trace", str(DEVICE)], {0})] if DEVICE else []),
]


def _special() -> dict:
    """The kind of every FIFO, device and link in the scratch folder (a file replacing one is a file replaced)."""
    return {p: stat.S_IFMT(os.lstat(p).st_mode) for p in W.rglob("*") if not p.is_file() or p.is_symlink()}


n = clean = tb = wrong = slow = 0
touched = nan_accepted = loud = internal = raw = 0
for cmd, argv, want, *more in cases:
    cwd = more[0] if more else ROOT
    before = {p: p.read_bytes() for p in W.rglob("*") if p.is_file() and not p.is_symlink()}
    kinds = _special()
    t = time.monotonic()
    try:
        r = subprocess.run(A + argv, cwd=cwd, capture_output=True, text=True, env={**ENV, "TMPDIR": str(W / "tmp")},
                           timeout=LIMIT)
        code, err = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        code, err = None, "TIMEOUT"
    dt = time.monotonic() - t
    n += 1
    after = {p: p.read_bytes() for p in W.rglob("*") if p.is_file() and not p.is_symlink()}
    changed = [str(p) for p in before if after.get(p) != before[p]]
    stray = [str(p) for p in after if p not in before]
    changed += [str(p) for p, k in kinds.items() if not os.path.lexists(p) or stat.S_IFMT(os.lstat(p).st_mode) != k]
    bad = []
    if more[1:] == ["nan"] and code == 0:
        nan_accepted += 1
        bad.append("NaN accepted")
    if more[1:] == ["esc"] and any(c in err for c in ("\x1b", "\u202e")):
        raw += 1
        bad.append("raw control characters printed")
    if more[1:] == ["esc"] and "\\x1b[2J" not in err:
        bad.append("the escaped text is missing")
    if len(err) > 100_000:
        loud += 1
        bad.append(f"{len(err):,} characters of output")
    if "Traceback" in err:
        tb += 1
        bad.append("traceback")
    if "internal error" in err:
        internal += 1
        bad.append("internal error")
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

# ---- issue 27: SIGTERM and SIGHUP, sent to the command alone (kill PID, docker stop) while user code runs
HANG = ("import os, pathlib, time\ndef step(mesh):\n    pathlib.Path(os.environ['MARK']).write_text(str(os.getpid()))\n"
        "    while True:\n        time.sleep(0.05)\n")
(W / "hang.py").write_text(HANG)
S = W / "repo-hang"
S.mkdir()
(S / "m.py").write_text(HANG)
(S / "pyproject.toml").write_text('[tool.hlo-analyzer]\nentry-points = ["m:step"]\nmesh = { X = 2 }\n')
SGIT = ["git", "-c", "user.name=r", "-c", "user.email=r@r", "-C", str(S)]
for argv in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "hang"]):
    subprocess.run(SGIT + argv, check=True, capture_output=True)
orphans = left = 0
for cmd, argv, cwd, sig in (("analyze", ["analyze", "hang.py:step", "--mesh", "X=2"], W, signal.SIGTERM),
                            ("analyze", ["analyze", "hang.py:step", "--mesh", "X=2"], W, signal.SIGHUP),
                            ("check", ["check", "--no-cache"], S, signal.SIGTERM),
                            ("diff", ["diff", "HEAD:pyproject.toml", "pyproject.toml"], S, signal.SIGTERM)):
    tmp = Path(tempfile.mkdtemp(prefix="fault-tmp-"))
    mark = W / "mark"
    mark.unlink(missing_ok=True)
    t = time.monotonic()
    proc = subprocess.Popen(A + argv, cwd=cwd, env={**ENV, "TMPDIR": str(tmp), "MARK": str(mark)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    while not mark.exists() and proc.poll() is None and time.monotonic() - t < 60:
        time.sleep(0.05)
    bad = []
    pid = int(mark.read_text()) if mark.exists() else None
    if pid is None:
        bad.append("never reached the user code")
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=60)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    n += 1
    want = 128 + sig
    if "Traceback" in err:
        tb += 1
        bad.append("traceback")
    if code != want:
        wrong += 1
        bad.append(f"exit {code}")
    deadline = time.monotonic() + 5
    alive = lambda p: p is not None and os.path.exists(f"/proc/{p}") and \
        Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"  # noqa: E731
    while alive(pid) and pid != proc.pid and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid) and pid != proc.pid:
        orphans += 1
        bad.append(f"process {pid} outlived it")
        os.kill(pid, signal.SIGKILL)
    stray = sorted(p.name for p in tmp.iterdir())
    if stray:
        left += 1
        bad.append(f"left in TMPDIR: {stray[:3]}")
    clean += not bad
    last = [l for l in err.strip().splitlines() if l.startswith("hlo-analyzer")][-1:] or err.strip().splitlines()[-1:]
    print(f"{'ok ' if not bad else 'BAD'} {time.monotonic() - t:5.1f}s exit {code} {cmd:8s} {signal.Signals(sig).name} "
          f"{' '.join(argv)[:55]} -> {(last or [''])[0][:120]} {bad or ''}", flush=True)
    subprocess.run(["rm", "-rf", str(tmp)])
print(f"cases {n}, clean {clean}, tracebacks {tb}, wrong exit status {wrong}, hangs {slow}, "
      f"files changed or left behind {touched}, NaN accepted {nan_accepted}, orphan processes {orphans}, "
      f"temporary folders left {left}, outputs over 100 KB {loud}, internal errors {internal}, "
      f"raw control characters printed {raw}")
sys.exit(0 if clean == n else 1)
