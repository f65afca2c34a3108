"""Extract every HLO module string of XLA's parser tests into tests/hlo/corpus/xla/, labelled by each installed XLA.

Input: a saved copy of openxla/xla's xla/hlo/parser/hlo_parser_test.cc (XLA's source is not committed here; save
it anywhere and name its commit). What is extracted:

- the TestData tables (CreateTestCases, CreateShortTestCases: `{"Name", R"(...)"[, replica_count]}`) and the
  non-round-trip table (CreateNonRoundtripTestCases: input and expected output, `Name` and `Name.output`);
- in every TEST/TEST_F body, each argument handed to ParseAndReturnVerifiedModule /
  ParseAndReturnUnverifiedModule that is a string the test builds without a loop: a raw string R"(...)", adjacent
  ordinary literals ("..." "..."), a variable holding one, absl::StrCat(...) and absl::StrFormat(fmt, ...) of
  them (InvalidDimLabels' three variants, AllReduceWithMode with and without the mode). Strings a test builds in
  a loop (the DeeplyNested* recursion-limit tests) are listed as not extracted, with their test name.

Each module is written as `<Test>[.<n>].hlo` whose first line names repository, path, commit and test (XLA's
lexer reads it as a comment). `--label` then asks XLA's own parser (`xla_client.hlo.hlo_module_from_text`) of
every Python given with `--python` about every file, each in a child process restarted after an abort (XLA's
parser CHECK-fails on some inputs), and records both verdicts with the jax/jaxlib versions in
tests/hlo/corpus/xla/manifest.json, so tests need no XLA call.

Run: python tests/hlo/extract_xla_corpus.py SAVED_COPY --commit SHA [--label --python python3
     --python /tmp/venv313/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
OUT = HERE / "corpus" / "xla"
MANIFEST = OUT / "manifest.json"
REPO = "openxla/xla"
PATH = "xla/hlo/parser/hlo_parser_test.cc"
TABLES = ("CreateTestCases", "CreateShortTestCases", "CreateNonRoundtripTestCases")
_PARSE_CALL = re.compile(r"\bParseAndReturn(?:Un)?[Vv]erifiedModule\s*\(")
_TEST = re.compile(r"^TEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\", "'": "'", "0": "\0"}


class Unsupported(Exception):
    """An expression this extractor does not evaluate (a loop-built string, a call result)."""


class _Expr:
    """A tiny reader of the C++ string expressions XLA's parser tests use."""

    def __init__(self, text: str, pos: int, env: dict[str, str]):
        self.t, self.i, self.env = text, pos, env

    def _ws(self) -> None:
        while True:
            m = re.compile(r"\s+|//[^\n]*|/\*.*?\*/", re.S).match(self.t, self.i)
            if not m or m.end() == self.i:
                return
            self.i = m.end()

    def _literal(self) -> str | None:
        self._ws()
        t, i = self.t, self.i
        m = re.compile(r'R"([^(\s]*)\(').match(t, i)
        if m:
            end = t.index(")" + m.group(1) + '"', m.end())
            self.i = end + len(m.group(1)) + 2
            return t[m.end():end]
        if t.startswith('"', i):
            out, j = [], i + 1
            while t[j] != '"':
                if t[j] == "\\":
                    out.append(_ESCAPES.get(t[j + 1], t[j + 1]))
                    j += 2
                else:
                    out.append(t[j])
                    j += 1
            self.i = j + 1
            return "".join(out)
        return None

    def _call_args(self) -> list[str]:
        args = []
        self._ws()
        if self.t.startswith(")", self.i):
            self.i += 1
            return args
        while True:
            args.append(self.expr())
            self._ws()
            c = self.t[self.i]
            self.i += 1
            if c == ")":
                return args
            if c != ",":
                raise Unsupported(f"unexpected {c!r} in a call")

    def _term(self) -> str:
        first = self._literal()
        if first is not None:
            parts = [first]
            while (more := self._literal()) is not None:  # adjacent literals concatenate
                parts.append(more)
            return "".join(parts)
        self._ws()
        m = re.compile(r"(?:absl::|std::|::)*([A-Za-z_]\w*)").match(self.t, self.i)
        if not m:
            raise Unsupported(f"no string at {self.t[self.i:self.i + 30]!r}")
        self.i = m.end()
        name = m.group(1)
        self._ws()
        if self.t.startswith("(", self.i):
            self.i += 1
            args = self._call_args()
            if name == "StrCat":
                return "".join(args)
            if name == "StrFormat":
                fmt, rest = args[0], list(args[1:])
                return re.sub(r"%s", lambda _: rest.pop(0), fmt)
            if name == "string" and len(args) == 1:
                return args[0]
            raise Unsupported(f"call {name}()")
        if name not in self.env:
            raise Unsupported(f"variable {name} not built from literals")
        return self.env[name]

    def expr(self) -> str:
        out = self._term()
        while True:
            self._ws()
            if self.t.startswith("+", self.i) and not self.t.startswith("+=", self.i):
                self.i += 1
                out += self._term()
            else:
                return out


def _assignments(body: str) -> dict[str, str]:
    """Variables a test body sets once to a string expression (a variable also appended to with += in a loop is
    left out: its value is not known without running the loop)."""
    env: dict[str, str] = {}
    appended = set(re.findall(r"\b(\w+)\s*\+=", body))
    for m in re.finditer(r"\b(\w+)(?:\[\])?\s*=(?!=)\s*", body):
        name = m.group(1)
        if name in appended or name in env:
            continue
        try:
            value = _Expr(body, m.end(), env).expr()
        except (Unsupported, ValueError, IndexError):
            continue
        env[name] = value
    return env


def _tables(src: str) -> list[tuple[str, str, str]]:
    """(test name, table, module text) for every entry of the TestData tables."""
    out = []
    for table in TABLES:
        start = src.index(f"{table}() {{")
        end = src.index("// clang-format on", start)
        part = src[start:end]
        for m in re.finditer(r'\{\s*(?://[^\n]*\s*)*"(\w+)",', part):
            reader = _Expr(part, m.end(), {})
            first = reader._literal()
            out.append((m.group(1), table, first))
            reader._ws()
            if part.startswith(",", reader.i):
                reader.i += 1
                second = reader._literal()
                if second is not None:  # the non-round-trip table: the expected output is a module too
                    out.append((m.group(1) + ".output", table, second))
    return out


def _test_bodies(src: str) -> list[tuple[str, str]]:
    heads = list(_TEST.finditer(src))
    bodies = []
    for k, m in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(src)
        bodies.append((m.group(2), src[m.end():end]))
    return bodies


def extract(src: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(name, origin, text) for every module string; and the tests whose module strings are built in a loop."""
    modules = _tables(src)
    skipped = []
    for test, body in _test_bodies(src):
        env = _assignments(body)
        found = 0
        unsupported = False
        for m in _PARSE_CALL.finditer(body):
            try:
                text = _Expr(body, m.end(), env).expr()
            except (Unsupported, ValueError, IndexError):
                unsupported = True
                continue
            found += 1
            modules.append((test, "TEST", text))
        if unsupported and not found and "ToString(" not in body:
            skipped.append(test)
    # one file per distinct (test, text); a test name seen twice gets .1, .2 ...
    seen: dict[str, int] = {}
    named = []
    done = set()
    for test, origin, text in modules:
        if (test, text) in done:
            continue
        done.add((test, text))
        n = seen.get(test, 0)
        seen[test] = n + 1
        named.append((test if n == 0 else f"{test}.{n}", origin, text))
    return named, skipped


def write(named, commit: str) -> list[str]:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.hlo"):
        old.unlink()
    files = []
    for name, origin, text in named:
        test = name.split(".")[0]
        head = f"// source: {REPO} {PATH} @ {commit}, test {test} ({origin})\n"
        path = OUT / f"{name}.hlo"
        path.write_bytes((head + text).encode())
        files.append(path.name)
    return files


_WORKER = r"""
import json, sys
import jax, jaxlib
from jax._src.lib import xla_client as xc
sys.stdout.write(json.dumps({"jax": jax.__version__, "jaxlib": jaxlib.__version__}) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    text = json.loads(line)
    try:
        xc.hlo.hlo_module_from_text(text)
        out = {"verdict": "valid"}
    except Exception as e:
        lines = [l.strip() for l in str(e).splitlines() if l.strip()]
        said = [l for l in lines if "error:" in l] or lines
        out = {"verdict": "invalid", "message": said[0][:300] if said else ""}
    sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush()
"""


class Judge:
    """XLA's parser of one Python in a child process, restarted after an abort (counted as a rejection)."""

    def __init__(self, python: str):
        self.python = python
        self.proc = None
        self.version = None

    def _start(self):
        env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
        self.proc = subprocess.Popen([self.python, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)
        self.version = json.loads(self.proc.stdout.readline())

    def verdict(self, text: str) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps(text) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            code = self.proc.returncode
            self.proc = None
            return {"verdict": "invalid", "message": f"XLA's parser aborted the process (exit {code})"}
        return json.loads(line)

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(10)


def label(files: list[str], pythons: list[str], commit: str, skipped: list[str]) -> dict:
    modules = {f: {} for f in files}
    versions = {}
    for py in pythons:
        judge = Judge(py)
        for f in files:
            v = judge.verdict((OUT / f).read_bytes().decode())
            key = f"jaxlib-{judge.version['jaxlib']}"
            versions[key] = judge.version
            modules[f][key] = v
        judge.close()
    manifest = {
        "source": {"repo": REPO, "path": PATH, "commit": commit},
        "how": "tests/hlo/extract_xla_corpus.py (verdicts: xla_client.hlo.hlo_module_from_text of each jaxlib)",
        "xla": versions,
        "not_extracted": {t: "module string built in a loop" for t in skipped},
        "modules": modules,
    }
    fd, tmp = tempfile.mkstemp(dir=OUT, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, MANIFEST)
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="saved copy of xla/hlo/parser/hlo_parser_test.cc")
    ap.add_argument("--commit", required=True, help="the XLA commit the copy is of")
    ap.add_argument("--label", action="store_true", help="ask each --python's XLA parser about every module")
    ap.add_argument("--python", action="append", default=[], help="a Python with jax installed (repeatable)")
    args = ap.parse_args(argv)
    src = Path(args.source).read_text()
    named, skipped = extract(src)
    files = write(named, args.commit)
    print(f"wrote {len(files)} modules to {OUT}")
    for t in skipped:
        print(f"not extracted (built in a loop): {t}")
    if args.label:
        manifest = label(files, args.python or [sys.executable], args.commit, skipped)
        for key in manifest["xla"]:
            n = sum(1 for m in manifest["modules"].values() if m[key]["verdict"] == "valid")
            print(f"{key}: {n} valid, {len(files) - n} invalid")
        keys = sorted(manifest["xla"])
        for f, m in sorted(manifest["modules"].items()):
            if len({m[k]["verdict"] for k in keys}) > 1:
                print("versions disagree: " + f + " " + ", ".join(f"{k}={m[k]['verdict']}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
