"""The command line under a reader that stops early (`hlo-analyzer rule HA101 | head -1`)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_closed_pipe_exits_quietly():
    # The reader is gone before the command writes (as `| head -1` is after its line): every write fails with
    # EPIPE, deterministically. The command must stop without a BrokenPipeError traceback.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "analyzer", "rule", "HA101"], stdout=write_end,
                              stderr=subprocess.PIPE, env=env, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    assert b"BrokenPipeError" not in done.stderr and b"Traceback" not in done.stderr, done.stderr.decode()
    assert done.returncode == 141  # 128 + SIGPIPE, what the shell reports for a writer the pipe stopped


def test_precommit_docs_do_not_name_a_missing_tag():
    tags = subprocess.run(["git", "tag", "--list"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    for doc in (ROOT / "docs" / "workflow.md", ROOT / ".pre-commit-hooks.yaml"):
        for line in doc.read_text(encoding="utf-8").splitlines():
            if line.strip().startswith(("rev:", "#     rev:")):
                rev = line.split("rev:", 1)[1].split("#")[0].strip()
                assert rev.startswith("<") or rev in tags, f"{doc.name} pins rev {rev!r}, which is not a tag"
