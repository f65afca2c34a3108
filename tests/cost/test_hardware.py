"""analyzer.theory.hardware: every packaged spec loads, cites its sources, and bad specs name file and key."""

import re
from importlib.resources import files

import pytest

import analyzer
from analyzer.errors import HardwareError
from analyzer.theory.hardware import list_hardware, load_hardware

EXPECTED = {"tpu-v3", "tpu-v4p", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-7x", "a100", "h100", "h200", "b200",
            "gb200-nvl72"}


def test_all_systems_are_packaged():
    assert set(list_hardware()) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_number_cites_a_book_section(name):
    text = (files("analyzer") / "_data" / "hardware" / f"{name}.toml").read_text()
    spec = load_hardware(name)
    assert spec.name == name
    for line in text.splitlines():
        code = line.split("#", 1)[0]
        if re.search(r"=\s*[\d\[{]", code) and re.search(r"\d", code.split("=", 1)[1]):
            # a number on this line: it names its source on the line or in the comment block just above
            assert "#" in line or _comment_above(text, line), f"{name}: no source for {line!r}"


def _comment_above(text, line):
    lines = text.splitlines()
    i = lines.index(line)
    return i > 0 and lines[i - 1].lstrip().startswith("#")


def test_book_numbers():
    v5e, v5p, v4p = load_hardware("tpu-v5e"), load_hardware("tpu-v5p"), load_hardware("tpu-v4p")
    assert v5e.ici.link_bandwidth_one_way == 4.5e10 and v5e.ici.link_bandwidth_bidi == 9e10
    assert v5e.ici.latency_threshold_bytes == pytest.approx(45e3)  # sharding.md: 45kB
    assert v5e.ici.wraparound.wraps((8, 16)) == (False, True)  # tpus.md: an 8x16 wraps on the long axis
    assert v4p.ici.wraparound.wraps((4, 4, 8)) == (True, True, True)
    assert v4p.ici.wraparound.wraps((2, 2, 4)) == (False, False, False)
    assert v5p.flops_per_second("bf16") / v5p.ici.link_bandwidth_bidi == pytest.approx(2550)
    h100 = load_hardware("h100")
    assert h100.nvlink.gpu_egress == 450e9 and h100.scale_out.node_egress == 400e9 and h100.nvlink.sharp
    assert load_hardware("gb200-nvl72").nvlink.domain_size == 72
    assert not load_hardware("a100").nvlink.sharp and load_hardware("a100").scale_out is None


def test_flops_per_dtype():
    h = load_hardware("h100")
    assert h.flops_per_second("bf16") == 9.9e14 and h.flops_per_second("f8e4m3fn") == 2e15
    assert h.flops_per_second("s8") == 2e15
    assert load_hardware("tpu-v5e").flops_per_second("f32") == 1.97e14  # no f32 rate in the book: bf16
    with pytest.raises(HardwareError, match="no FLOPs/s for dtype 'f32'"):
        load_hardware("tpu-v5e").flops_per_second("f32", fallback=False)


def test_unknown_name_lists_valid_ones():
    with pytest.raises(HardwareError, match=r"unknown hardware 'tpu-v5'; did you mean 'tpu-v5p'\?.*tpu-v5e"):
        load_hardware("tpu-v5")


def test_lazy_export():
    assert analyzer.load_hardware("tpu-v6e").kind == "tpu"


def _write(tmp_path, text):
    p = tmp_path / "spec.toml"
    p.write_text(text)
    return p


GOOD = (files("analyzer") / "_data" / "hardware" / "tpu-v5e.toml").read_text()


def test_load_from_path(tmp_path):
    p = _write(tmp_path, GOOD.replace('name = "tpu-v5e"', 'name = "my-v5e"'))
    spec = load_hardware(p)
    assert spec.name == "my-v5e" and spec.path == str(p)
    assert load_hardware(str(p)).name == "my-v5e"


@pytest.mark.parametrize("change, words", [
    (("bandwidth = 8.2e11", "bandwith = 8.2e11"), "unknown key 'bandwith' in [hbm]; did you mean 'bandwidth'"),
    (("bandwidth = 8.2e11", ""), "missing key 'bandwidth' in [hbm]"),
    (("hop_latency = 1e-6", 'hop_latency = "1us"'), "key 'hop_latency' in [ici] must be a number"),
    (('kind = "tpu"', 'kind = "npu"'), "must be 'tpu' or 'gpu'"),
    (("bf16 = 1.97e14", "bf61 = 1.97e14"), "unknown dtype 'bf61' in [flops]"),
    (('rule = "full-axis"', 'rule = "sometimes"'), "'full-axis' or 'cube'"),
    (("[hbm]", "[hbm\n"), "not valid TOML"),
])
def test_bad_spec_names_file_and_key(tmp_path, change, words):
    p = _write(tmp_path, GOOD.replace(*change, 1))
    with pytest.raises(HardwareError) as info:
        load_hardware(p)
    assert str(p) in str(info.value)
    assert words in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(HardwareError, match="does not exist"):
        load_hardware(tmp_path / "nope.toml")
