"""Reading the processor's int8 instructions, and oneDNN's cap on them."""

from __future__ import annotations

from pathlib import Path

from indexplug_colbert import cpu

AVX2_ONLY = "fpu sse2 avx avx2 fma"
SAPPHIRE = "fpu sse2 avx avx2 fma avx512f avx512_vnni avx_vnni amx_int8 amx_tile"


def write(tmp_path: Path, flags: str, key: str = "flags") -> Path:
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: Some CPU\n{key}\t\t: {flags}\n\n")
    return info


def test_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    assert cpu.cpu_flags(write(tmp_path, SAPPHIRE)) == frozenset(SAPPHIRE.split())
    assert cpu.cpu_flags(write(tmp_path, "fp asimd asimddp", "Features")) == {
        "fp",
        "asimd",
        "asimddp",
    }
    assert cpu.cpu_flags(tmp_path / "missing") == frozenset()


def test_int8_instructions_need_vnni_or_amx() -> None:
    assert cpu.int8_instructions(frozenset(AVX2_ONLY.split()), None) == ()
    assert cpu.int8_instructions(frozenset(SAPPHIRE.split()), None) == (
        "amx_int8",
        "avx512_vnni",
        "avx_vnni",
    )
    assert cpu.int8_instructions(frozenset({"avx2", "avx_vnni"}), None) == ("avx_vnni",)


def test_a_onednn_cap_below_vnni_rules_them_out() -> None:
    flags = frozenset(SAPPHIRE.split())
    for cap in ("AVX2", "avx2", "AVX512_CORE", "SSE41"):
        assert cpu.int8_instructions(flags, cap) == (), cap
    assert cpu.int8_instructions(flags, "AVX512_CORE_VNNI") == (
        "amx_int8",
        "avx512_vnni",
        "avx_vnni",
    )
