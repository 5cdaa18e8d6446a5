//! Kernels of the engine's own on a CUDA device, for the parts libtorch's operations leave the
//! GPU idle in, each a CUDA source (`NAME.cu`) beside the Rust that launches it (`NAME.rs`):
//! a linear-attention layer's inputs to the delta rule (`linear_inputs`), the delta rule's preparation within each chunk and its
//! pass across a prefix's chunks (`delta_rule`), the gated norm after it (`gated_norm`), a
//! mixture of experts' router (`router`), its grouping of rows by expert and its weighted sum
//! (`experts`), a gated MLP's activation (`gated_activation`), a decoder's RMSNorm
//! (`rms_norm`), and the questions' attention to their own tokens merged with their attention
//! to the prefix (`suffix_attention`). Each does in one to three launches what libtorch's forms
//! do in two to twenty small kernels.
//!
//! They come as cubins compiled ahead by NVRTC (`nvrtc.py --out DIR`, here too, one an
//! architecture; the GPU bundle carries them) and run through the CUDA driver, which every GPU
//! node has, on libtorch's default stream, so they are ordered with libtorch's work. No CUDA
//! toolkit, crate or compiler is needed where they run.
//!
//! Opt-in while they are measured: [`ENV`] names the cubins' folder, and a build that sets it
//! scores by another arithmetic revision ([`super::arithmetic`]). Without it, and on a CPU,
//! nothing here runs. The suite runs the launch path on the CPU against a stand-in driver that
//! runs the kernel's own source (`crates/vlm/tests/kernels/fake_libcuda.cpp`).

mod delta_rule;
mod driver;
mod experts;
mod gated_activation;
mod gated_norm;
mod linear_inputs;
mod rms_norm;
mod router;
#[cfg(test)]
pub(crate) mod stand_in;
mod suffix_attention;

use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void, CString};
use std::path::{Path, PathBuf};
use std::ptr::null_mut;
use std::sync::OnceLock;

use tch::{Device, Kind, Tensor};

use super::arithmetic::cuda_kernels_folder;
pub use super::arithmetic::CUDA_KERNELS_ENV as ENV;
pub use delta_rule::{WithinChunks, CHUNK, KEY_DIM};
use driver::{Driver, Handle, COMPUTE_CAPABILITY_MAJOR, COMPUTE_CAPABILITY_MINOR, MAX_DYNAMIC_SHARED_SIZE_BYTES};
pub use experts::ExpertGroups;

/// Where the driver library is looked for (`BPALS_LIBCUDA` overrides it, for the suite's stand-in).
const LIBCUDA: &str = "libcuda.so.1";

/// Threads a block, every kernel's.
const THREADS: u32 = 256;

/// One kernel: its cubins' name (`FILE.sm_XX.cubin`), its function's, and its dynamic shared
/// memory a block (at most, where a launch's widths set it).
struct KernelSpec {
    file: &'static str,
    name: &'static str,
    shared_bytes: i64,
}

/// Of a kernel's two forms, bf16's then f32's, the one for a model in `kind`.
fn in_precision(forms: &[KernelSpec; 2], kind: Kind) -> &KernelSpec {
    &forms[usize::from(kind == Kind::Float)]
}

/// `t` (.., .., .., entries) as a kernel reads it through its strides: itself where its entries
/// are contiguous and its first three strides fit the kernel's ints, else a contiguous copy; with
/// those three strides.
fn strided(t: &Tensor) -> (Tensor, [c_int; 3]) {
    let fits = |t: &Tensor| t.stride()[3] == 1 && t.stride()[..3].iter().all(|&x| x <= i64::from(c_int::MAX));
    let t = if fits(t) { t.shallow_clone() } else { t.contiguous() };
    let stride = t.stride();
    (t, [stride[0], stride[1], stride[2]].map(|x| x as c_int))
}

/// Every kernel the engine launches, loaded together.
const KERNELS: [&KernelSpec; 20] = [
    &delta_rule::WITHIN,
    &delta_rule::ACROSS,
    &linear_inputs::LINEAR_INPUTS[0],
    &linear_inputs::LINEAR_INPUTS[1],
    &experts::COUNT,
    &experts::OFFSETS,
    &experts::PLACE,
    &experts::WEIGHTED_SUM[0],
    &experts::WEIGHTED_SUM[1],
    &gated_activation::GATED_ACTIVATION[0],
    &gated_activation::GATED_ACTIVATION[1],
    &gated_norm::GATED_NORM[0],
    &gated_norm::GATED_NORM[1],
    &rms_norm::RMS_NORM[0],
    &rms_norm::RMS_NORM[1],
    &rms_norm::RMS_NORM[2],
    &router::ROUTER[0],
    &router::ROUTER[1],
    &suffix_attention::SUFFIX_ATTENTION[0],
    &suffix_attention::SUFFIX_ATTENTION[1],
];

/// The kernels, loaded for one device.
pub struct CudaKernels {
    driver: Driver,
    device: i64,
    /// The GPU's architecture, as the cubins are named (`sm_90`).
    pub arch: String,
    /// Each kernel's function, by its name.
    functions: HashMap<&'static str, Handle>,
}

// SAFETY: a CUfunction belongs to its context, not to a thread; the driver may be called from
// any thread with that context current, which every launch makes sure of.
unsafe impl Send for CudaKernels {}
unsafe impl Sync for CudaKernels {}

impl CudaKernels {
    /// The driver at `library`, and the cubins in `dir` for device `device`'s architecture.
    pub fn load(library: &Path, dir: &Path, device: i64) -> Result<CudaKernels, String> {
        let driver = Driver::open(library)?;
        let (mut ordinal, mut major, mut minor) = (0, 0, 0);
        // SAFETY: each call writes only through the pointers it is given.
        unsafe {
            driver.check((driver.init)(0), "cuInit")?;
            driver.check((driver.device_get)(&mut ordinal, device as c_int), "cuDeviceGet")?;
            driver.check((driver.device_attribute)(&mut major, COMPUTE_CAPABILITY_MAJOR, ordinal), "the GPU's compute capability")?;
            driver.check((driver.device_attribute)(&mut minor, COMPUTE_CAPABILITY_MINOR, ordinal), "the GPU's compute capability")?;
        }
        let arch = format!("sm_{major}{minor}");
        let mut kernels = CudaKernels { driver, device, arch, functions: HashMap::new() };
        kernels.make_context_current()?;
        // Each cubin loaded once, however many of the kernels it holds.
        let mut modules = HashMap::new();
        for kernel in KERNELS {
            let module = match modules.get(kernel.file) {
                Some(&module) => module,
                None => {
                    let module = kernels.load_module(dir, kernel.file)?;
                    modules.insert(kernel.file, module);
                    module
                }
            };
            let function = kernels.load_function(module, kernel)?;
            kernels.functions.insert(kernel.name, function);
        }
        Ok(kernels)
    }

    /// The cubin `file` for this GPU in `dir`, loaded.
    fn load_module(&self, dir: &Path, file: &str) -> Result<Handle, String> {
        let arch = &self.arch;
        let cubin = dir.join(format!("{file}.{arch}.cubin"));
        let image = std::fs::read(&cubin).map_err(|e| {
            format!("{}: {e}; {ENV} names a folder without a cubin for this GPU ({arch}): make one with `crates/vlm/src/cuda_kernels/nvrtc.py --arch {arch} --out DIR`", cubin.display())
        })?;
        let mut module: Handle = null_mut();
        let d = &self.driver;
        // SAFETY: the driver copies the image before it returns.
        unsafe { d.check((d.module_load_data)(&mut module, image.as_ptr().cast()), &format!("loading {}", cubin.display()))? };
        Ok(module)
    }

    /// `kernel`'s function from its loaded cubin, allowed its shared memory.
    fn load_function(&self, module: Handle, kernel: &KernelSpec) -> Result<Handle, String> {
        let name = kernel.name;
        let mut function: Handle = null_mut();
        let symbol = CString::new(name).expect("a kernel's name has no NUL");
        let d = &self.driver;
        // SAFETY: the name is NUL-terminated; the driver writes only through the pointer.
        unsafe {
            d.check((d.module_function)(&mut function, module, symbol.as_ptr()), &format!("{}.{}.cubin: {name}", kernel.file, self.arch))?;
            d.check(
                (d.function_attribute)(function, MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel.shared_bytes as c_int),
                &format!("{name}'s shared memory"),
            )?;
        }
        Ok(function)
    }

    /// The context libtorch works in (the device's primary context) current on this thread.
    fn make_context_current(&self) -> Result<(), String> {
        let d = &self.driver;
        let mut context: Handle = null_mut();
        // SAFETY: each call writes only through the pointer it is given.
        unsafe {
            d.check((d.context_current)(&mut context), "cuCtxGetCurrent")?;
            if context.is_null() {
                d.check((d.primary_context_retain)(&mut context, self.device as c_int), "cuDevicePrimaryCtxRetain")?;
                d.check((d.set_context_current)(context), "cuCtxSetCurrent")?;
            }
        }
        Ok(())
    }

    /// Launches `kernel` on a `grid` of blocks of [`THREADS`] with `shared` bytes of dynamic
    /// shared memory, its arguments the `tensors`' data pointers, then the `numbers`, then the
    /// `reals`, in the kernel's order. A launch the driver refuses stops the caller with its
    /// words: a GPU's work cannot go on without the kernel's outputs.
    fn launch(&self, kernel: &KernelSpec, grid: (c_uint, c_uint), shared: i64, tensors: &[&Tensor], numbers: &[c_int], reals: &[f32]) {
        assert!(shared <= kernel.shared_bytes, "{}: {shared} bytes of shared memory, more than its {}", kernel.name, kernel.shared_bytes);
        let function = self.functions[kernel.name];
        let mut pointers: Vec<u64> = tensors.iter().map(|t| t.data_ptr() as u64).collect();
        let (mut numbers, mut reals) = (numbers.to_vec(), reals.to_vec());
        let mut args: Vec<Handle> = pointers.iter_mut().map(|p| (p as *mut u64).cast()).collect();
        args.extend(numbers.iter_mut().map(|x| (x as *mut c_int).cast::<c_void>()));
        args.extend(reals.iter_mut().map(|x| (x as *mut f32).cast::<c_void>()));
        let d = &self.driver;
        // SAFETY: the callers pass the arguments in the kernel's signature (pointers to tensors
        // that live until the call returns and, on libtorch's stream, until the kernel has run;
        // then ints, then floats); the block and shared memory are those it was written for. The
        // null stream is libtorch's.
        let launched = self.make_context_current().and_then(|()| {
            let code = unsafe {
                (d.launch)(function, grid.0, grid.1, 1, THREADS, 1, 1, shared as c_uint, null_mut(), args.as_mut_ptr(), null_mut())
            };
            d.check(code, &format!("launching {}", kernel.name))
        });
        if let Err(e) = launched {
            panic!("{ENV}: {e}");
        }
    }
}

/// The kernels for `device` where they are asked for, as [`for_device`]; a failure to load them
/// stops the caller with the driver's words (the native scorer checks them as it opens, so a
/// build stops there before any image is scored).
pub fn asked_for(device: Device) -> Option<&'static CudaKernels> {
    match for_device(device)? {
        Ok(kernels) => Some(kernels),
        Err(e) => panic!("{ENV}: {e}"),
    }
}

/// The kernels for `device`, where [`ENV`] asks for them and the device is a GPU; the variable is
/// read and the kernels loaded on first use, once a process. An error (no driver, no cubin for
/// this GPU) is the same on every call.
pub fn for_device(device: Device) -> Option<Result<&'static CudaKernels, String>> {
    static LOADED: OnceLock<Option<Result<CudaKernels, String>>> = OnceLock::new();
    let Device::Cuda(index) = device else { return None };
    let loaded = LOADED.get_or_init(|| {
        let dir = cuda_kernels_folder()?;
        let library = std::env::var_os("BPALS_LIBCUDA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(LIBCUDA));
        Some(CudaKernels::load(&library, &dir, index as i64))
    });
    Some(match loaded.as_ref()? {
        Ok(kernels) if kernels.device != index as i64 => {
            Err(format!("{ENV}: the kernels were loaded for GPU {}, not {index}", kernels.device))
        }
        Ok(kernels) => Ok(kernels),
        Err(e) => Err(e.clone()),
    })
}
