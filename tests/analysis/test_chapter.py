"""Acceptance: the chapter's programs give exactly the collectives the chapter predicts.

For each of the four matmul cases, the `A[I_X, J] -> A[I, J_X]` reshard, each `shard_map` collective and the
FSDP, TP and FSDP+TP training steps (L scanned layers), the table must hold the predicted collectives over
the right user axes, with the chapter's V in bytes and `count` = executions per step. The expected bytes are
computed here from the chapter's definitions (V = the gathered array for AllGather, the unreduced array for
AllReduce / ReduceScatter, the whole array over the group for AllToAll, one device's buffer for a permute),
exactly: the tolerance on bytes is 0.

Meshes: X=4,Y=2; the same with the devices permuted; X=2,Y=2,Z=2; and data=4,model=2 (the user's own names).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from examples import chapter

pytestmark = pytest.mark.slow

TPU = "tpu:v5e:2x4"

BF16 = 2
I, J, K, L = chapter.I, chapter.J, chapter.K, chapter.LAYERS
CFG = chapter.STEP_CONFIG
B, S, D, F = CFG.batch, CFG.seq, CFG.d_model, CFG.d_ff

MESHES = {  # key -> (X, Y, names of the chapter's X and Y, all axes)
    "xy": (4, 2, "X", "Y", ("X", "Y")),
    "permuted": (4, 2, "X", "Y", ("X", "Y")),
    "xyz": (2, 2, "X", "Y", ("X", "Y", "Z")),
    "named": (4, 2, "data", "model", ("data", "model")),
}


def table(report) -> Counter:
    """The report's collectives as a multiset of (kind, axes, bytes, count)."""
    return Counter((r.kind, tuple(r.axes), int(r.bytes), r.count) for r in report.collectives.itertuples())


def expected_matmuls(mesh_key: str) -> dict[str, list[tuple]]:
    x, _y, X, Y, _all = MESHES[mesh_key]
    return {
        # Case 1: A[I_X, J] . B[J, K_Y] -> C[I_X, K_Y]: no communication.
        "matmul_case1": [],
        # Case 2: A[I_X, J_Y] . B[J, K]: AllGather_Y A -> A[I_X, J]; V = the gathered block [I/X, J].
        "matmul_case2": [("all-gather", (Y,), I // x * J * BF16, 1)],
        # Case 3: A[I, J_X] . B[J_X, K] -> C[I, K]{U_X}; AllReduce_X of C[I, K].
        "matmul_case3": [("all-reduce", (X,), I * K * BF16, 1)],
        # Case 3 with output C[I_X, K]: ReduceScatter_X of C[I, K]{U_X}.
        "matmul_case3_rs": [("reduce-scatter", (X,), I * K * BF16, 1)],
        # Case 4: A[I_X, J] . B[J, K_X]: AllGather_X B -> B[J, K].
        "matmul_case4": [("all-gather", (X,), J * K * BF16, 1)],
        # A[I_X, J] -> A[I, J_X]: AllToAll_X; V = the whole array over the group.
        "reshard": [("all-to-all", (X,), I * J * BF16, 1)],
        # shard_map over X of blocks of A[I_X, J]:
        "psum": [("all-reduce", (X,), I // x * J * BF16, 1)],
        "all_gather": [("all-gather", (X,), I * J * BF16, 1)],
        "psum_scatter": [("reduce-scatter", (X,), I * J * BF16, 1)],
        "all_to_all": [("all-to-all", (X,), I * J * BF16, 1)],
        "ppermute": [("collective-permute", (X,), I // x * J * BF16, 1)],
    }


def expected_matmul(name: str, mesh_key: str) -> list[tuple]:
    """The chapter's prediction, except where XLA chose another plan (said and checked here)."""
    if name == "matmul_case3_rs" and mesh_key == "xyz":
        # On X=2,Y=2,Z=2 XLA does not reduce-scatter: it slices A's rows by the Y coordinate (free, A is
        # replicated over Y), all-reduces the half-height partial C over X, then swaps the blocks of the
        # devices whose X and Y coordinates differ with a collective-permute. The table must say so.
        return [("all-reduce", ("X",), I // 2 * K * BF16, 1), ("collective-permute", ("X", "Y"), I // 2 * K * BF16, 1)]
    if name == "matmul_case4" and mesh_key == "xyz":
        # On X=2,Y=2,Z=2 XLA gathers B over the 4 devices of Y and Z instead of the 2 of X: it slices its
        # X-shard of B further (B is replicated over Y and Z), moves the quarter-blocks into Y,Z order with a
        # collective-permute, then all-gathers the whole B over (Y, Z).
        return [("collective-permute", ("X", "Y", "Z"), J * K // 4 * BF16, 1), ("all-gather", ("Y", "Z"), J * K * BF16, 1)]
    return expected_matmuls(mesh_key)[name]


def expected_mlp_steps(mesh_key: str) -> dict[str, list[tuple]]:
    """The chapter's MLP block In . W_in . W_out, L layers in a scan, one SGD step (training.md)."""
    x, y, X, Y, every = MESHES[mesh_key]
    n = x * y * (2 if len(every) == 3 else 1)
    loss = ("all-reduce", every, 4, 1)  # the f32 mean of the loss over every device holding a batch shard
    w = D * F * BF16  # one weight matrix
    return {
        # FSDP over every axis: W_in[D_XY.., F], W_out[F, D_XY..]. Per layer AllGather both weights forward
        # and again backward, ReduceScatter both gradients (training.md: 4DF + 8DF bytes per layer).
        "fsdp_mlp_step": [loss] + [("all-gather", every, w, L)] * 4 + [("reduce-scatter", every, w, L)] * 2,
        # TP: In[B_X.., D], W_in[D, F_Y], W_out[F_Y, D]: AllReduce_Y of the output [B/X, S, D] forward and of
        # dIn backward; the data axes all-reduce both weight gradients [D, F/Y].
        "tp_mlp_step": ([("all-reduce", tuple(a for a in every if a != Y), 4, 1)]
                        + [("all-reduce", (Y,), B // (n // y) * S * D * BF16, L)] * 2
                        + [("all-reduce", tuple(a for a in every if a != Y), w // y, L)] * 2),
        # FSDP+TP: In[B_X, D_Y], W_in[D_X, F_Y], W_out[F_Y, D_X]. Forward: AllGather_Y In, AllGather_X both
        # weights, ReduceScatter_Y the output. Backward: AllGather_Y dOut, AllGather_Y In again (for dW_in),
        # AllGather_X both weights, ReduceScatter_Y dIn, ReduceScatter_X both weight gradients.
        "fsdp_tp_mlp_step": ([loss] + [("all-gather", (Y,), B // x * S * D * BF16, L)] * 3
                             + [("all-gather", (X,), w // y, L)] * 4
                             + [("reduce-scatter", (Y,), B // x * S * D * BF16, L)] * 2
                             + [("reduce-scatter", (X,), w // y, L)] * 2),
    }


MATMULS = list(expected_matmuls("xy"))
STEPS = list(expected_mlp_steps("xy"))


@pytest.mark.parametrize("mesh_key", ["xy", "permuted", "xyz", "named"])
@pytest.mark.parametrize("name", MATMULS)
def test_matmul_cases_and_shard_map_collectives(analysis, name, mesh_key):
    report = analysis(name, mesh_key)
    assert table(report) == Counter(expected_matmul(name, mesh_key)), report.collectives.to_string()


@pytest.mark.parametrize("mesh_key", ["xy", "permuted", "named"])
@pytest.mark.parametrize("name", STEPS)
def test_mlp_training_steps(analysis, name, mesh_key):
    report = analysis(name, mesh_key)
    assert table(report) == Counter(expected_mlp_steps(mesh_key)[name]), report.collectives.to_string()


def test_fsdp_on_three_axes_gathers_over_all_of_them(analysis):
    report = analysis("fsdp_mlp_step", "xyz")
    assert table(report) == Counter(expected_mlp_steps("xyz")["fsdp_mlp_step"]), report.collectives.to_string()


def _per_step(report, kind: str, axes: tuple[str, ...]) -> int:
    rows = report.collectives
    sel = rows[(rows.kind == kind) & (rows["axes"].map(tuple) == axes)]
    return int((sel.bytes * sel["count"]).sum())


def _weights_per_layer() -> int:
    """Elements of one block's weights: W_q, W_k, W_v [D, H|KV, K], W_o [H, K, D], W_in [D, F], W_out [F, D]."""
    kv = D // CFG.heads * CFG.kv_heads
    return D * D + 2 * D * kv + D * D + 2 * D * F


def test_transformer_fsdp_step_moves_every_weight_three_times(analysis):
    """FSDP of the full block: each weight gathered forward and backward and its gradient reduce-scattered,
    L times per step; nothing else but the loss's scalar."""
    report = analysis("fsdp_step")
    w = _weights_per_layer() * BF16
    assert _per_step(report, "all-gather", ("X", "Y")) == 2 * L * w
    assert _per_step(report, "reduce-scatter", ("X", "Y")) == L * w
    assert set(report.collectives.kind) == {"all-gather", "reduce-scatter", "all-reduce"}
    assert _per_step(report, "all-reduce", ("X", "Y")) == 4
    assert set(report.collectives["count"]) == {1, L}


def test_transformer_tp_step(analysis):
    """TP: per layer an AllReduce_Y of the residual stream [B/X, S, D] after attention and after the MLP,
    forward and backward (Megatron); the data axis all-reduces the Y-sharded weight gradients."""
    report = analysis("tp_step")
    act = B // 4 * S * D * BF16
    assert _per_step(report, "all-reduce", ("Y",)) == 4 * L * act
    assert _per_step(report, "all-reduce", ("X",)) == L * _weights_per_layer() // 2 * BF16 + 4


def test_transformer_fsdp_tp_step(analysis):
    report = analysis("fsdp_tp_step")
    w = _weights_per_layer() // 2 * BF16  # the X-gathered weights are still sharded over Y
    act = B // 4 * S * D * BF16
    assert _per_step(report, "all-gather", ("X",)) == 2 * L * w
    assert _per_step(report, "reduce-scatter", ("X",)) == L * w
    assert _per_step(report, "all-gather", ("Y",)) == 6 * L * act  # In before attention and MLP, x2 backward
    assert _per_step(report, "reduce-scatter", ("Y",)) == 4 * L * act
    # the RMSNorms' per-token sums over the D shards: f32 [B/X, S] per norm, two norms forward and backward
    assert _per_step(report, "all-reduce", ("Y",)) == 4 * L * (B // 4 * S * 4)


def test_counts_are_executions_per_step(analysis):
    """Every per-layer collective of a scanned step runs L times; the loss reduction once."""
    report = analysis("fsdp_tp_mlp_step")
    counts = Counter(report.collectives["count"])
    assert counts[L] == len(report.collectives) - 1 and counts[1] == 1


def test_rows_carry_source_pass_and_notation(analysis):
    report = analysis("fsdp_tp_mlp_step")
    rows = report.collectives
    assert set(rows.pass_) == {"forward", "backward"}
    assert all(src.rsplit(":", 1)[0].endswith(("models.py", "chapter.py")) for src in rows.source if src)
    ag = rows[(rows.kind == "all-gather") & (rows["axes"].map(tuple) == ("X",))]
    # the weights W_in[D_X, F_Y] and W_out[F_Y, D_X], gathered over X, keep their Y sharding. The forward
    # pass's gathers feed the einsums `bd,df->bf` / `bf,fd->bd`, whose subscripts name the dims (D, F); the
    # backward pass's dots are jax's transposes, whose operands are not the spec's: I, J by position there.
    forward = set(ag[ag.pass_ == "forward"].notation)
    assert forward == {"AllGather_X: [D_X, F_Y] -> [D, F_Y]", "AllGather_X: [F_Y, D_X] -> [F_Y, D]"}
    assert set(ag[ag.pass_ == "backward"].notation) <= forward | {"AllGather_X: [I_X, J_Y] -> [I, J_Y]",
                                                                  "AllGather_X: [I_Y, J_X] -> [I_Y, J]"}
    assert set(ag.array) == {"params['w_in']", "params['w_out']"}  # the argument's pytree path
    rs = rows[rows.kind == "reduce-scatter"]
    assert all("{U_" in n for n in rs.notation)
    assert set(rs.original_ops) == {"all-reduce + dynamic-slice"}


def test_matmul_notation(analysis):
    """The notation of the collective itself, dimension letters from the program's einsum (`ij,jk->ik`: the
    chapter's own C[I, K]{U_X}), else by position (the reshard has no einsum)."""
    assert analysis("matmul_case3").collectives.notation[0] == "AllReduce_X: [I, K]{U_X} -> [I, K]"
    assert analysis("matmul_case3_rs").collectives.notation[0] == "ReduceScatter_X,I: [I, K]{U_X} -> [I_X, K]"
    assert analysis("reshard").collectives.notation[0] == "AllToAll_X: [I_X, J] -> [I, J_X]"
    # an argument's other sharded dims keep their subscripts; global_shape is then the whole array
    case2 = analysis("matmul_case2", "named").collectives
    assert case2.notation[0] == "AllGather_model: [I_data, J_model] -> [I_data, J]"
    assert case2.global_shape[0] == (I, J)



# ---------------------------------------------------------------------------------------------- TPU target
# The same programs compiled ahead of time by libtpu for a v5e 2x4 slice (the real TPU compiler; no TPU
# needed). Skipped with the reason when libtpu is missing.


@pytest.mark.tpu
@pytest.mark.parametrize("name", MATMULS)
def test_matmul_cases_on_tpu(analysis, tpu_reason, name):
    if tpu_reason:
        pytest.skip(tpu_reason)
    report = analysis(name, "xy", TPU)
    assert table(report) == Counter(expected_matmul(name, "xy")), report.collectives.to_string()


@pytest.mark.tpu
@pytest.mark.parametrize("name", STEPS)
def test_mlp_training_steps_on_tpu(analysis, tpu_reason, name):
    if tpu_reason:
        pytest.skip(tpu_reason)
    report = analysis(name, "xy", TPU)
    assert table(report) == Counter(expected_mlp_steps("xy")[name]), report.collectives.to_string()
    assert "torus coordinates" in " ".join(report.notes)


def _bytes_by_axis_and_kind(report) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = defaultdict(int)
    for r in report.collectives.itertuples():
        out[(",".join(r.axes), r.kind)] += int(r.bytes) * r.count
    return out


@pytest.mark.tpu
@pytest.mark.parametrize("name", ["fsdp_step", "tp_step", "fsdp_tp_step"])
def test_cpu_and_tpu_agree_per_axis_and_kind(analysis, tpu_reason, name):
    """Bytes per step per (mesh axis, kind) within 10% between the cpu and the TPU compile (the TPU compiler
    may pad shapes); the comparison is printed (run with -s to see it)."""
    if tpu_reason:
        pytest.skip(tpu_reason)
    cpu = _bytes_by_axis_and_kind(analysis(name, "xy", "cpu"))
    tpu = _bytes_by_axis_and_kind(analysis(name, "xy", TPU))
    print(f"\n{name}: bytes per step, cpu vs {TPU}")
    print(f"  {'axes':8s} {'kind':16s} {'cpu':>12s} {TPU:>12s}  ratio")
    for key in sorted(set(cpu) | set(tpu)):
        a, b = cpu.get(key, 0), tpu.get(key, 0)
        print(f"  {key[0]:8s} {key[1]:16s} {a:12d} {b:12d}  {b / a if a else float('inf'):.3f}")
    assert set(cpu) == set(tpu)
    for key in cpu:
        assert tpu[key] == pytest.approx(cpu[key], rel=0.10), key


@pytest.fixture(scope="module")
def collective_matmul(tpu_reason):
    """An FSDP+TP layer large enough that the TPU compiler turns the gathers and reduce-scatters over X into
    collective matmuls (rings of collective-permutes around partial dots), analysed for both targets.

    The TPU compiler decides by the compute per chip against the bytes gathered, so the tokens per chip (B/X = 2048)
    make the rings and the weights can stay small: D=512, F=2048 gives the same rings (3 steps per gather, 5 per
    reduce-scatter) as D=4096, F=16384 did at a third of the libtpu compile (7.8 against 28 s CPU); B=4096 or
    B=2048 at D=4096 gives none (checked on jax 0.10 with its libtpu)."""
    if tpu_reason:
        pytest.skip(tpu_reason)
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import analyzer
    from analyzer.compile.lower import make_mesh

    mesh = make_mesh({"X": 4, "Y": 2})
    layers, b, d, f = 2, 8192, 512, 2048

    def step(params, x):
        def layer(h, w):
            w1, w2 = w
            return h + jnp.tanh(h @ w1) @ w2, None

        def loss(p):
            h, _ = jax.lax.scan(layer, x, p)
            return jnp.mean(h.astype(jnp.float32) ** 2)

        g = jax.grad(loss)(params)
        return jax.tree.map(lambda a, c: a - 0.1 * c, params, g)

    def sh(*spec):
        return NamedSharding(mesh, P(*spec))

    params = (jax.ShapeDtypeStruct((layers, d, f), jnp.bfloat16, sharding=sh(None, "X", "Y")),
              jax.ShapeDtypeStruct((layers, f, d), jnp.bfloat16, sharding=sh(None, "Y", "X")))
    x = jax.ShapeDtypeStruct((b, d), jnp.bfloat16, sharding=sh("X", None))
    fn = jax.jit(step, out_shardings=(sh(None, "X", "Y"), sh(None, "Y", "X")))
    return {t: analyzer.analyze(fn, params, x, mesh=mesh, target=t) for t in ("cpu", TPU)}, (layers, b, d, f)


@pytest.mark.tpu
def test_collective_matmul_is_one_logical_collective(collective_matmul):
    reports, (layers, _batch, d, f) = collective_matmul
    tpu = reports[TPU].collectives
    rings = tpu[tpu.permute_steps > 0]
    assert len(rings) >= 2, tpu.to_string()
    assert set(rings.kind) <= {"all-gather", "reduce-scatter"}
    assert rings.overlapped.all() and (rings.permute_steps >= 3).all()  # N-1 steps at least on an axis of 4
    assert set(rings["axes"].map(tuple)) == {("X",)}
    assert not (tpu.kind == "collective-permute").any()  # no permute step is left over as its own row
    cpu = _bytes_by_axis_and_kind(reports["cpu"])
    tpu_bytes = _bytes_by_axis_and_kind(reports[TPU])
    for key in set(cpu) | set(tpu_bytes):
        assert tpu_bytes.get(key, 0) == pytest.approx(cpu.get(key, 0), rel=0.10), key
    # both weights [D_X, F_Y] and [F_Y, D_X]: gradients reduce-scattered over X once per layer (V = D*F/Y)
    assert cpu[("X", "reduce-scatter")] == 2 * layers * d * f // 2 * BF16
