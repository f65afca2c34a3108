"""Measure which attributes XLA's parser takes on each opcode (the table `ALLOWED_ATTRIBUTES` in
analyzer/hlo/opcodes.py) and which async-sugar opcodes it knows.

For every opcode, a template instruction (the shortest valid corpus/fixture module that has one on a single
line, or a small synthetic module for opcodes the corpus lacks) gets `, KEY=0` appended for every candidate
key (every key seen in the corpus plus a list of XLA attribute names); XLA's parser
(`xla_client.hlo.hlo_module_from_text`, jax 0.10) says "unexpected attribute KEY" when the opcode does not take
it. Values are not checked by that message, so `0` serves for every key. XLA can abort the process on some
inputs, so a child process parses and is restarted after a crash. Prints the table as Python.

Run: `JAX_PLATFORMS=cpu python tests/hlo/make_attribute_table.py > /tmp/table.py` (a few minutes).
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
WORKER = r'''
import sys, json
from jax._src.lib import xla_client as xc
for line in sys.stdin:
    job = json.loads(line)
    try:
        xc.hlo.hlo_module_from_text(job["text"]); r = "OK"
    except Exception as e:
        r = str(e)
    print(json.dumps({"id": job["id"], "r": r[:2000]}), flush=True)
'''
EXTRA_KEYS = """result_accuracy statistics origin original_value parameter_replication sharding frontend_attributes
backend_config metadata control-predecessors channel_id replica_groups dimensions to_apply calls constrain_layout
use_global_device_ids split_dimension is_host_transfer custom_call_has_side_effect output_to_operand_aliasing
schedule api_version padding_type feature_group_count batch_group_count operand_precision algorithm distribution
infeed_config outfeed_config outfeed_shape async_execution_thread execution_thread slice_sizes indices_are_sorted
unique_indices is_stable largest k mode exponent_bits mantissa_bits rng_algorithm literal window dim_labels
lhs_batch_dims rhs_batch_dims lhs_contracting_dims rhs_contracting_dims sparsity kind domain index iota_dimension
direction type source_target_pairs slice padding fft_type fft_length left_side lower unit_diagonal transpose_a
branch_computations true_computation false_computation condition body select scatter num_carries is_reverse
cross_program_prefetch_index dynamic_slice_sizes operand_layout_constraints custom_call_target""".split()


def run_jobs(jobs: list[dict]) -> dict[str, str]:
    results: dict[str, str] = {}
    pending = jobs
    while pending:
        proc = subprocess.run([sys.executable, "-c", WORKER], input="".join(json.dumps(j) + "\n" for j in pending),
                              capture_output=True, text=True)
        done = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        results.update((d["id"], d["r"]) for d in done)
        if len(done) < len(pending):  # the parser aborted on the next job
            results[pending[len(done)]["id"]] = "CRASH"
        pending = pending[len(done) + 1:]
    return results


def _synthetic() -> dict[str, str]:
    def mod(line: str, t: str = "f32") -> str:
        return f"HloModule m\nENTRY e {{\n  p = {t}[4] parameter(0)\n  ROOT q = {line}\n}}\n"
    out = {}
    for o in ("abs acos acosh asin asinh atanh cbrt ceil cosh erf exponential-minus-one log log-plus-one logistic "
              "sign sinh sqrt tan round-nearest-afz round-nearest-even opt-barrier").split():
        out[o] = mod(f"f32[4] {o}(p)")
    for o in "atan2 minimum power remainder".split():
        out[o] = mod(f"f32[4] {o}(p, p)")
    for o in "not popcnt count-leading-zeros".split():
        out[o] = mod(f"s32[4] {o}(p)", "s32")
    for o in "mulhi shift-right-arithmetic".split():
        out[o] = mod(f"s32[4] {o}(p, p)", "s32")
    out["imag"] = mod("f32[4] imag(p)", "c64")
    out["complex"] = mod("c64[4] complex(p, p)")
    out["reverse"] = mod("f32[4] reverse(p), dimensions={0}")
    out["all-gather-start"] = mod("f32[8] all-gather-start(p), dimensions={0}, replica_groups={{0,1}}")
    out["get-dimension-size"] = mod("s32[] get-dimension-size(p), dimensions={0}")
    return out


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from analyzer.hlo.parser import parse_hlo

    files = (sorted((ROOT / "fixtures").rglob("*.hlo")) + sorted((HERE / "samples").glob("*.hlo"))
             + [p for p in sorted((HERE / "corpus").glob("*.hlo")) if not p.name.endswith(".invalid.hlo")])
    keys = set(EXTRA_KEYS)
    seen: dict[str, set] = collections.defaultdict(set)
    templates: dict[str, str] = {}
    for p in files:
        text = p.read_text()
        try:
            m = parse_hlo(text, lenient=True)
        except Exception:
            continue
        lines = text.split("\n")
        for _, i in m.instructions():
            keys.update(a.key for a in i.attributes)
            seen[i.opcode].update(a.key for a in i.attributes)
            ln = lines[i.position.line - 1]
            if ln.count("(") != ln.count(")") or ln.count("{") != ln.count("}"):
                continue
            li = i.position.line - 1
            if i.opcode not in templates or len(text) < len(templates[i.opcode]):
                templates[i.opcode] = "\n".join(lines[:li] + [ln.rstrip() + ", @KEY@=0"] + lines[li + 1:])
    for op, text in _synthetic().items():
        templates.setdefault(op, text.replace("\n}\n", ", @KEY@=0\n}\n"))
    keys = sorted(k for k in keys if re.fullmatch(r"[a-zA-Z_][\w.\-]*", k))
    jobs = [{"id": f"{op}\t{k}", "text": t.replace("@KEY@", k)} for op, t in sorted(templates.items()) for k in keys]
    results = run_jobs(jobs)
    allowed: dict[str, set] = collections.defaultdict(set)
    unknown = set()
    for jid, r in results.items():
        op, k = jid.split("\t")
        if "Unknown opcode" in r:
            unknown.add(op)
        elif "unexpected attribute" not in r:
            allowed[op].add(k)
    for op in allowed:
        allowed[op] |= seen.get(op, set())
    common = set.intersection(*allowed.values())
    print(f"# COMMON_ATTRIBUTES: {sorted(common)}; unknown opcodes: {sorted(unknown)}")
    for op in sorted(allowed):
        own = sorted(allowed[op] - common)
        print(f'    "{op}": ({", ".join(json.dumps(k) for k in own)}{"," if len(own) == 1 else ""}),')


if __name__ == "__main__":
    main()
