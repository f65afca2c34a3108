"""analyzer.hlo.sharding: every HloSharding form XLA prints parses, prints back, and bad text names the column."""

import pytest

from analyzer.errors import AnalyzerError, ShardingError
from analyzer.hlo.sharding import HloSharding, ShardingSyntaxError, parse_hlo_sharding

ROUND_TRIP = [
    "{replicated}",
    "{maximal device=0}",
    "{manual}",
    "{unknown}",
    "{devices=[4,2]<=[8]}",
    "{devices=[2,2]0,2,1,3}",
    "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}",
    "{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}",
    "{{replicated}, {devices=[2]<=[2]}}",
    "{{maximal device=1}, {{manual}, {replicated}}}",
    "{replicated shard_as 1}",
    "{}",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(text):
    assert str(parse_hlo_sharding(text)) == text


def test_iota_expansion_with_transpose():
    s = parse_hlo_sharding("{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}")
    assert s.kind == "tiled"
    assert s.tile_dims == (1, 2, 4)
    assert s.data_tile_dims == (1, 2)
    assert s.replication == 4
    # iota(8).reshape(4,2).T = [[0,2,4,6],[1,3,5,7]] reshaped to (1,2,4)
    assert s.tile_assignment.tolist() == [[[0, 2, 4, 6], [1, 3, 5, 7]]]


def test_explicit_device_list():
    s = parse_hlo_sharding("{devices=[2,2]0,2,1,3}")
    assert s.tile_assignment.tolist() == [[0, 2], [1, 3]]
    assert s.iota is None


def test_manual_subgroup():
    s = parse_hlo_sharding("{devices=[2,1,4]<=[8] last_tile_dims={manual}}")
    assert s.is_manual and s.data_tile_dims == (2, 1) and s.replication == 1


def test_metadata_is_tolerated():
    s = parse_hlo_sharding('{devices=[4,2]<=[8] metadata={op_name="jit(f)/a{b}" source_line=3}}')
    assert s.data_tile_dims == (4, 2)
    assert "op_name" in s.metadata


def test_tuple_leaves():
    s = parse_hlo_sharding("{{replicated}, {{devices=[2]<=[2]}, {manual}}}")
    assert s.is_tuple
    assert [leaf.kind for leaf in s.leaves()] == ["replicated", "tiled", "manual"]


def test_replicated_views():
    assert parse_hlo_sharding("{replicated}").is_replicated
    assert parse_hlo_sharding("{devices=[1,1,8]<=[8] last_tile_dim_replicate}").is_replicated
    assert not parse_hlo_sharding("{devices=[8]<=[8]}").is_replicated


@pytest.mark.parametrize(
    "text, column, words",
    [
        ("{devices=[4,2]<=[7]}", 17, "iota"),
        ("{devices=[2,2]0,1,2}", 15, "need 4 device ids"),
        ("{replicatd}", 2, "unknown sharding item"),
        ("devices=[2]0,1}", 1, "'{'"),
        ("{maximal device=}", 17, "device id"),
        ("{devices=[2]0,0}", 13, "twice"),
        ("{replicated manual}", 13, "one kind"),
        ("{replicated last_tile_dim_replicate}", 37, "tiled"),
        ("{devices=[99999999,99999999]<=[9999999999999999]}", 10, "more than any machine"),
        # what XLA's parser rejects, as `check_hlo_sharding` says it
        ("{devices=[2,2]<=[2,2]}", 22, "'T('"),
        ("{devices=[1]0}", 2, "more than one device"),
        ("{devices=[2]0,1 replicated}", 2, "has no devices"),
        # what XLA's parser takes and the analysis does not: `device=` not right after `maximal`, `unreduced` (no
        # such HloSharding kind), a second kind
        ("{device=0 maximal}", 2, "unknown sharding item 'device'"),
        ("{unreduced}", 2, "unknown sharding item 'unreduced'"),
        ("{maximal device=0 device=1}", 19, "unknown sharding item 'device'"),
        ("{maximal shard_as 1 device=0}", 10, "'device=' after 'maximal', got 'shard_as'"),
        ("{devices=[2]0,1 devices=[2]2,3}", 17, "'tiled' after 'tiled'"),
    ],
)
def test_bad_text_names_the_column(text, column, words):
    with pytest.raises(ShardingSyntaxError) as info:
        parse_hlo_sharding(text)
    err = info.value
    assert isinstance(err, ShardingError) and isinstance(err, AnalyzerError)
    assert err.column == column, str(err)
    assert words in str(err)


def test_invariants_are_checked():
    with pytest.raises(ValueError):
        HloSharding(kind="tiled", tile_dims=(2, 2), device_ids=(0, 1, 2))
    with pytest.raises(ValueError):
        HloSharding(kind="sideways")


from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from(ROUND_TRIP), cut=st.integers(0, 80), insert=st.text(
    alphabet="{}[]()<=,0123456789 Tdevicsreplatdmnu_x", max_size=6))
def test_mutated_text_parses_or_raises_sharding_errors(base, cut, insert):
    text = base[:cut] + insert + base[cut + len(insert) // 2:]
    try:
        s = parse_hlo_sharding(text)
    except ShardingSyntaxError as e:
        assert 1 <= e.column <= len(text) + 1
        return
    assert str(parse_hlo_sharding(str(s))) == str(s)  # whatever parses prints back to itself


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from([t for t in ROUND_TRIP if not t.startswith("{{") and t != "{}"]), cut=st.integers(0, 80),
       insert=st.text(alphabet="}[]()<=,0123456789 Tdevicsreplatdmnu_x", max_size=6))
def test_what_xla_parser_rejects_the_analysis_rejects_alike(base, cut, insert):
    """One reader: a single sharding that XLA's parser rejects (`check_hlo_sharding`) is rejected by
    `parse_hlo_sharding` with the same message at the same column (the verifier's rules come after it)."""
    from analyzer.hlo.sharding import check_hlo_sharding

    text = base[:cut] + insert + base[cut + len(insert) // 2:]
    try:
        check_hlo_sharding(text)
    except ShardingSyntaxError as e:
        with pytest.raises(ShardingSyntaxError) as again:
            parse_hlo_sharding(text)
        assert (again.value.message, again.value.column) == (e.message, e.column)



@pytest.mark.parametrize("named, tiled", [
    # jax 0.11+'s XLA prints shardings by mesh axis name; each reads as the tile assignment it stands for
    ("{mesh['X'=4,'Y'=2], [{}, {'X'}, {'Y'}]}", "{devices=[1,4,2]<=[8]}"),
    ("{mesh['X'=4,'Y'=2], [{'Y','X'}, {}]}", "{devices=[8,1]<=[4,2]T(1,0)}"),
    ("{mesh['X'=4,'Y'=2], [{}, {'Y'}]}", "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}"),
    ("{mesh['X'=4,'Y'=2], [{'X':(2)2}, {'Y'}]}", "{devices=[2,2,2]<=[2,2,2]T(1,2,0) last_tile_dim_replicate}"),
    ("{mesh['X'=4,'Y'=2], [{}, {'X'}], manual={'Y'}}", "{devices=[1,4,2]<=[8] last_tile_dims={manual}}"),
    ("{mesh['X'=4,'Y'=2], [{}, {}], replicated={'X'}}", "{replicated}"),
    ("{mesh['X'=4,'Y'=2], replicated}", "{replicated}"),  # a scalar's
    ("{mesh['X'=4,'Y'=2], manual, metadata={op_name=\"a\"}}", "{manual}"),
    ("{mesh['X'=4,'Y'=2], [{?}, {'Y', ?}]}", "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}"),  # open dims
    ("{mesh['X'=4,'Y'=2], device_ids=(7,6,5,4,3,2,1,0), [{'X'}, {}]}",
     "{devices=[4,1,2]7,6,5,4,3,2,1,0 last_tile_dim_replicate}"),
])
def test_named_shardings_read_as_their_tile_assignment(named, tiled):
    got, want = parse_hlo_sharding(named), parse_hlo_sharding(tiled)
    assert (got.kind, got.tile_dims, got.device_ids, got.last_tile_dims) == \
           (want.kind, want.tile_dims, want.device_ids, want.last_tile_dims)


@pytest.mark.parametrize("text, message", [
    ("{mesh['X'=4,'Y'=2], [{}, {'Z'}]}", "axis 'Z' is not an axis of the mesh"),
    ("{mesh['X'=4,'Y'=2], [{'X'}, {'X'}]}", "used twice"),  # (XLA's parser aborts the process on this one)
    ("{mesh['X'=4,'Y'=2], [{'X':(1)3}]}", "does not divide"),
    ("{mesh['X'=4,'Y'=2], [{}], bogus={'X'}}", "unknown named-sharding item"),
    ("{mesh['X'=4,'Y'=2], [{?, 'X'}]}", "no axis may follow"),
    ("{mesh['X'=4,'Y'=2], device_ids=(7,6,5,4,3,2,1,1), [{'X'}]}", "each of the mesh's 8 devices once"),
])
def test_bad_named_shardings_are_positioned_errors(text, message):
    with pytest.raises(ShardingError, match=message):
        parse_hlo_sharding(text)
