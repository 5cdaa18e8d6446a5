"""Compiles kernels of this folder with NVRTC for GPU architectures, on any machine: no GPU needed.

NVRTC comes with PyTorch's CUDA wheels (`nvidia/cu13/lib` beside torch). Compiling to a cubin
runs ptxas, whose report says what no CPU test can: the registers a thread takes, spills to
local memory, and so how many blocks fit on an SM. The suite holds the kernels to it for the
GPUs the engine is measured on; a GPU session reads the same report beside its timings.

    python3 crates/vlm/src/cuda_kernels/nvrtc.py crates/vlm/src/cuda_kernels/delta_rule_across.cu --arch sm_90 -DCHUNK=64
    python3 crates/vlm/src/cuda_kernels/nvrtc.py crates/vlm/src/cuda_kernels/*.cu --arch sm_80,sm_90,sm_100 --out DIR

With --out it writes one cubin a kernel file and architecture, DIR/NAME.sm_XX.cubin, which the engine loads
where BPALS_CUDA_KERNELS names DIR (scripts/gpu-bundle makes them for the bundle).
"""

import argparse
import ctypes
import re
from pathlib import Path


def nvrtc_library():
    """NVRTC from the installed PyTorch's CUDA wheels, its builtins loaded first (NVRTC opens
    them by name), or None where this PyTorch has none (a CPU build)."""
    try:
        import nvidia
    except ImportError:
        return None
    for root in map(Path, nvidia.__path__):
        for lib in sorted(root.glob("*/lib/libnvrtc.so.*")):
            builtins = sorted(lib.parent.glob("libnvrtc-builtins.so.*"))
            if builtins and ".alt." not in lib.name:
                ctypes.CDLL(str(builtins[0]), mode=ctypes.RTLD_GLOBAL)
                return ctypes.CDLL(str(lib))
    return None


def compile_cubin(source, arch, defines=()):
    """Compiles `source` (a path) for `arch` (sm_80, sm_90, ...); returns ptxas's report as a dict
    (registers, spill_stores, spill_loads, stack_bytes: the most of any of its kernels; log) and
    the cubin's bytes (cubin).
    Raises RuntimeError with NVRTC's log when it does not compile."""
    lib = nvrtc_library()
    if lib is None:
        raise RuntimeError("no NVRTC library beside this PyTorch (a CPU build of it?)")
    program = ctypes.c_void_p()
    name = Path(source).name.encode()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(program), Path(source).read_bytes(), name, 0, None, None))
    try:
        # Headers beside the source (bf16.cuh) are found as a compiler finds them.
        include = f"--include-path={Path(source).resolve().parent}".encode()
        options = [f"-arch={arch}".encode(), b"-Xptxas=-v", include, *(d.encode() for d in defines)]
        compiled = lib.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetProgramLogSize(program, ctypes.byref(size)))
        log = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetProgramLog(program, log))
        log = log.value.decode(errors="replace")
        if compiled != 0:
            raise RuntimeError(f"{source} does not compile for {arch}:\n{log}")
        _check(lib, lib.nvrtcGetCUBINSize(program, ctypes.byref(size)))
        cubin = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetCUBIN(program, cubin))
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))
    # One report an entry function: the file's worst of each.
    spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    registers = re.findall(r"Used (\d+) registers", log)
    if not (spills and registers):
        raise RuntimeError(f"ptxas's report for {arch} is not in the form expected:\n{log}")
    worst = [max(int(entry[i]) for entry in spills) for i in range(3)]
    return {"registers": max(map(int, registers)), "stack_bytes": worst[0], "spill_stores": worst[1],
            "spill_loads": worst[2], "log": log, "cubin": cubin.raw}


def _check(lib, status):
    if status != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"NVRTC: {lib.nvrtcGetErrorString(status).decode()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", metavar="source")
    parser.add_argument("--arch", default="sm_90", help="comma-separated: sm_80,sm_90")
    parser.add_argument("--out", type=Path, help="write NAME.ARCH.cubin here, one an architecture")
    args, defines = parser.parse_known_args()
    bad = [d for d in defines if not d.startswith("-D")]
    if bad:
        parser.error(f"only -DNAME=VALUE may follow the source, not {bad[0]}")
    for source in args.sources:
        for arch in args.arch.split(","):
            report = compile_cubin(source, arch, defines)
            print(report["log"].strip())
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                path = args.out / f"{Path(source).stem}.{arch}.cubin"
                path.write_bytes(report["cubin"])
                print(f"wrote {path} ({len(report['cubin'])} bytes)")


if __name__ == "__main__":
    main()
