"""How the PyTorch-only benches compile and launch the engine's own kernels (crates/vlm/src/cuda_kernels/):
NVRTC through `torch.cuda._compile_kernel`, for the GPU they run on.

Its launches pass each argument as the Python value's C type, and a Python float as a C double:
a kernel's `float` parameter would read half of it. `float32` gives the float's bits as an int,
which the launch passes as four bytes that the kernel reads as the float."""

import ctypes
import struct
from pathlib import Path

import torch

KERNELS = Path(__file__).resolve().parent.parent / "crates" / "vlm" / "src" / "cuda_kernels"


def float32(x):
    """`x` for a kernel's `float` parameter: its bits as an f32, carried by an int."""
    return struct.unpack("<i", struct.pack("<f", x))[0]


def compile_kernel(file, name, options=(), shared=0):
    """Kernel `name` of crates/vlm/src/cuda_kernels/FILE.cu compiled by NVRTC for this GPU and allowed `shared`
    bytes of dynamic shared memory, or None and why not."""
    if not hasattr(torch.cuda, "_compile_kernel"):
        return None, f"PyTorch {torch.__version__} has no torch.cuda._compile_kernel"
    if shared > getattr(torch.cuda.get_device_properties(0), "shared_memory_per_block_optin", 49152):
        return None, f"{name} needs {shared} bytes of shared memory a block, more than this GPU has"
    try:
        source = (KERNELS / f"{file}.cu").read_text()
        kernel = torch.cuda._compile_kernel(source, name, nvcc_options=[f"--include-path={KERNELS}", *options])
    except (OSError, RuntimeError) as e:  # no NVRTC library found, or the source did not compile
        return None, f"NVRTC: {e}"
    if shared <= 48 * 1024:
        return kernel, None
    if hasattr(kernel, "set_shared_memory_config"):
        kernel.set_shared_memory_config(shared)
    else:  # older PyTorch: raise the kernel's dynamic shared memory limit through the driver
        max_dynamic_shared = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        libcuda = torch.cuda._utils._get_gpu_runtime_library()
        assert libcuda.cuFuncSetAttribute(kernel.func, max_dynamic_shared, ctypes.c_int(shared)) == 0
    return kernel, None
