//! Kernels of the engine's own on a CUDA device, for the parts libtorch's operations leave the
//! GPU idle in: a linear-attention layer's inputs to the delta rule (its convolution, SiLU and
//! norms, some ten passes over the activations there; `benches/kernels/linear_inputs.cu` takes
//! one), the delta rule's preparation within each chunk, some twenty small kernels over
//! all the chunks there (`benches/kernels/delta_rule_within.cu` makes a chunk's in one block), and
//! its pass across a prefix's chunks, five small kernels a chunk there
//! (`benches/kernels/delta_rule_across.cu` holds each head's state on chip through all of them).
//!
//! They come as cubins compiled ahead by NVRTC (`benches/kernels/nvrtc.py --out DIR`, one an
//! architecture; the GPU bundle carries them) and run through the CUDA driver, which every GPU
//! node has, on libtorch's default stream, so they are ordered with libtorch's work. No CUDA
//! toolkit, crate or compiler is needed where they run.
//!
//! Opt-in while they are measured: [`ENV`] names the cubins' folder, and a build that sets it
//! scores by another arithmetic revision ([`super::arithmetic`]). Without it, and on a CPU,
//! nothing here runs. The suite runs the launch path on the CPU against a stand-in driver that
//! runs the kernel's own source (`tests/kernels/fake_libcuda.cpp`).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::{Path, PathBuf};
use std::ptr::null_mut;
use std::sync::OnceLock;

use libloading::Library;
use tch::{Device, Kind, Tensor};

use super::arithmetic::cuda_kernels_folder;
pub use super::arithmetic::CUDA_KERNELS_ENV as ENV;
use super::config::LinearAttentionConfig;

/// Where the driver library is looked for (`BPALS_LIBCUDA` overrides it, for the suite's stand-in).
const LIBCUDA: &str = "libcuda.so.1";

/// The delta-rule kernels' geometry, as `delta_rule_within.cu` and `delta_rule_across.cu` are
/// compiled for the engine: tokens a chunk (at most, within), a key head's width, threads a block.
pub const CHUNK: i64 = 64;
pub const KEY_DIM: i64 = 128;
const THREADS: u32 = 256;
/// State columns a block of the pass across holds.
const TILE: i64 = 64;

/// One kernel: its cubins' name (`FILE.sm_XX.cubin`), its function's, and its dynamic shared
/// memory a block (at most, where a launch's widths set it).
struct KernelSpec {
    file: &'static str,
    name: &'static str,
    shared_bytes: i64,
}

/// The preparation within chunks: a chunk's keys and one staged operand, the system's inverse,
/// and the decays and betas.
const WITHIN: KernelSpec = KernelSpec {
    file: "delta_rule_within",
    name: "delta_rule_within",
    shared_bytes: 4 * (2 * CHUNK * (KEY_DIM + 4) + CHUNK * (CHUNK + 4) + 3 * CHUNK),
};
/// The pass across chunks: the state tile, a chunk's new values, one chunk's keys.
const ACROSS: KernelSpec = KernelSpec {
    file: "delta_rule_across",
    name: "delta_rule_across",
    shared_bytes: 4 * (KEY_DIM * TILE + CHUNK * TILE + KEY_DIM * (CHUNK + 4)),
};
/// A linear layer's inputs, one kernel a precision: a token's channels and its heads' norms, in
/// no more than the shared memory every GPU gives a block unasked.
const LINEAR_INPUTS: [KernelSpec; 2] = [
    KernelSpec { file: "linear_inputs", name: "linear_inputs_bf16", shared_bytes: 48 * 1024 },
    KernelSpec { file: "linear_inputs", name: "linear_inputs_f32", shared_bytes: 48 * 1024 },
];

type CuResult = c_int;
type Handle = *mut c_void;

/// The driver's entry points the kernels need (CUDA's driver API, by their exported names).
struct Driver {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    device_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult,
    context_current: unsafe extern "C" fn(*mut Handle) -> CuResult,
    primary_context_retain: unsafe extern "C" fn(*mut Handle, c_int) -> CuResult,
    set_context_current: unsafe extern "C" fn(Handle) -> CuResult,
    module_load_data: unsafe extern "C" fn(*mut Handle, *const c_void) -> CuResult,
    module_function: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CuResult,
    function_attribute: unsafe extern "C" fn(Handle, c_int, c_int) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch:
        unsafe extern "C" fn(Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut Handle, *mut Handle) -> CuResult,
    error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    /// Kept loaded for as long as the entry points above are used.
    _library: Library,
}

const COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const COMPUTE_CAPABILITY_MINOR: c_int = 76;
const MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;

impl Driver {
    fn open(path: &Path) -> Result<Driver, String> {
        // SAFETY: loading the CUDA driver runs its initialisers, which expect nothing of us.
        let library = unsafe { Library::new(path) }.map_err(|e| format!("the CUDA driver ({}) did not load: {e}", path.display()))?;
        macro_rules! entry {
            ($name:literal) => {
                // SAFETY: the type is the driver API's signature of this entry point.
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("the CUDA driver ({}) has no {}: {e}", path.display(), $name))?
            };
        }
        Ok(Driver {
            init: entry!("cuInit"),
            device_get: entry!("cuDeviceGet"),
            device_attribute: entry!("cuDeviceGetAttribute"),
            context_current: entry!("cuCtxGetCurrent"),
            primary_context_retain: entry!("cuDevicePrimaryCtxRetain"),
            set_context_current: entry!("cuCtxSetCurrent"),
            module_load_data: entry!("cuModuleLoadData"),
            module_function: entry!("cuModuleGetFunction"),
            function_attribute: entry!("cuFuncSetAttribute"),
            launch: entry!("cuLaunchKernel"),
            error_string: entry!("cuGetErrorString"),
            _library: library,
        })
    }

    /// `Ok` for CUDA_SUCCESS, else the driver's words for the code and what was being done.
    fn check(&self, code: CuResult, doing: &str) -> Result<(), String> {
        if code == 0 {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: the driver writes a pointer to a static string, or leaves it null.
        let known = unsafe { (self.error_string)(code, &mut text) } == 0 && !text.is_null();
        let words = if known { unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned() } else { "unknown error".to_string() };
        Err(format!("{doing}: CUDA error {code} ({words})"))
    }
}

/// The kernels, loaded for one device.
pub struct CudaKernels {
    driver: Driver,
    device: i64,
    /// The GPU's architecture, as the cubins are named (`sm_90`).
    pub arch: String,
    delta_rule_within: Handle,
    delta_rule_across: Handle,
    /// bf16's, then f32's.
    linear_inputs: [Handle; 2],
}

/// The delta rule's chunks prepared for the pass across them (`chunked_rule_across`'s tensors,
/// each (rows, heads, chunks, chunk, ·)).
pub struct WithinChunks {
    pub values: Tensor,
    pub keys_read: Tensor,
    pub q_decayed: Tensor,
    pub within: Tensor,
    /// The keys decayed to the chunk's end and the chunk's whole decay (.., 1, 1), where asked.
    pub carried: Option<(Tensor, Tensor)>,
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
        let mut kernels = CudaKernels {
            driver,
            device,
            arch,
            delta_rule_within: null_mut(),
            delta_rule_across: null_mut(),
            linear_inputs: [null_mut(); 2],
        };
        kernels.make_context_current()?;
        kernels.delta_rule_within = kernels.load_function(dir, &WITHIN)?;
        kernels.delta_rule_across = kernels.load_function(dir, &ACROSS)?;
        for (i, kernel) in LINEAR_INPUTS.iter().enumerate() {
            kernels.linear_inputs[i] = kernels.load_function(dir, kernel)?;
        }
        Ok(kernels)
    }

    /// `kernel`'s function from its cubin for this GPU in `dir`, allowed its shared memory.
    fn load_function(&self, dir: &Path, kernel: &KernelSpec) -> Result<Handle, String> {
        let (name, arch) = (kernel.name, &self.arch);
        let cubin = dir.join(format!("{}.{arch}.cubin", kernel.file));
        let image = std::fs::read(&cubin).map_err(|e| {
            format!("{}: {e}; {ENV} names a folder without a cubin for this GPU ({arch}): make one with `benches/kernels/nvrtc.py --arch {arch} --out DIR`", cubin.display())
        })?;
        let (mut module, mut function): (Handle, Handle) = (null_mut(), null_mut());
        let symbol = std::ffi::CString::new(name).expect("a kernel's name has no NUL");
        let d = &self.driver;
        // SAFETY: the driver copies the image before it returns; the name is NUL-terminated.
        unsafe {
            d.check((d.module_load_data)(&mut module, image.as_ptr().cast()), &format!("loading {}", cubin.display()))?;
            d.check((d.module_function)(&mut function, module, symbol.as_ptr()), &format!("{}: {name}", cubin.display()))?;
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

    /// Whether the preparation kernel takes chunks of these widths (f32, chunks of a multiple of 8
    /// tokens up to 64, keys of 128, values in whole key widths).
    pub fn takes_within(chunk: i64, key_dim: i64, value_dim: i64, kind: Kind) -> bool {
        chunk % 8 == 0 && (8..=CHUNK).contains(&chunk) && key_dim == KEY_DIM && value_dim % KEY_DIM == 0 && kind == Kind::Float
    }

    /// Whether the pass-across kernel takes a pass of these widths (f32, 64-token chunks, keys of
    /// 128, values in whole tiles).
    pub fn takes_across(chunk: i64, key_dim: i64, value_dim: i64, kind: Kind) -> bool {
        chunk == CHUNK && key_dim == KEY_DIM && value_dim % TILE == 0 && kind == Kind::Float
    }

    /// The delta rule's chunks prepared for the pass across them, from `q` and `k` (rows, heads,
    /// chunks, chunk, dk), `v` (.., dv), the log decays `g` (rows, heads, chunks, chunk) and `beta`
    /// (.., chunk, 1), all padded to whole chunks; what each chunk hands the next where `carry`.
    pub fn delta_rule_within(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        g: &Tensor,
        beta: &Tensor,
        carry: bool,
    ) -> Result<WithinChunks, String> {
        let size = v.size();
        let (b, h, n, chunk, dv) = (size[0], size[1], size[2], size[3], size[4]);
        assert!(Self::takes_within(chunk, q.size()[4], dv, v.kind()), "chunks the kernel does not take: {size:?}");
        let [q, k, v, g, beta] = [q, k, v, g, beta].map(Tensor::contiguous);
        let options = (Kind::Float, v.device());
        let keys = || Tensor::empty([b, h, n, chunk, KEY_DIM], options);
        let (values, keys_read, q_decayed, within) =
            (Tensor::empty_like(&v), keys(), keys(), Tensor::empty([b, h, n, chunk, chunk], options));
        let (k_to_end, chunk_decay) = if carry {
            (keys(), Tensor::empty([b, h, n, 1, 1], options))
        } else {
            (Tensor::empty([1], options), Tensor::empty([1], options))
        };
        let tensors = [&q, &k, &v, &g, &beta, &values, &keys_read, &q_decayed, &within, &k_to_end, &chunk_decay];
        let grid = ((b * h * n) as c_uint, 1);
        self.launch(
            &WITHIN,
            self.delta_rule_within,
            grid,
            WITHIN.shared_bytes,
            &tensors,
            &[chunk as c_int, dv as c_int, c_int::from(carry)],
            &[],
        )?;
        Ok(WithinChunks { values, keys_read, q_decayed, within, carried: carry.then_some((k_to_end, chunk_decay)) })
    }

    /// The delta rule's pass across chunks (`Chunked::states_kept`'s loop): from `first` (rows,
    /// heads, dk, dv), each chunk's starting state (rows, heads, n, dk, dv) and new values (rows,
    /// heads, n, chunk, dv), and the state after the last chunk where `keep`. `values` (.., chunk,
    /// dv), `keys_read` and `keys_to_end` (.., chunk, dk), `chunk_decay` one a chunk.
    pub fn delta_rule_across(
        &self,
        values: &Tensor,
        keys_read: &Tensor,
        keys_to_end: &Tensor,
        chunk_decay: &Tensor,
        first: &Tensor,
        keep: bool,
    ) -> Result<(Tensor, Tensor, Option<Tensor>), String> {
        let size = values.size();
        let (b, h, n, chunk, dv) = (size[0], size[1], size[2], size[3], size[4]);
        assert!(Self::takes_across(chunk, keys_read.size()[4], dv, values.kind()), "a pass the kernel does not take: {size:?}");
        let [values, keys_read, keys_to_end, chunk_decay, first] =
            [values, keys_read, keys_to_end, chunk_decay, first].map(Tensor::contiguous);
        let options = (Kind::Float, values.device());
        let states = Tensor::empty([b, h, n, KEY_DIM, dv], options);
        let news = Tensor::empty([b, h, n, chunk, dv], options);
        let last = Tensor::empty(if keep { vec![b, h, KEY_DIM, dv] } else { vec![1] }, options);
        let tensors = [&values, &keys_read, &keys_to_end, &chunk_decay, &first, &states, &news, &last];
        let grid = ((b * h) as c_uint, (dv / TILE) as c_uint);
        self.launch(
            &ACROSS,
            self.delta_rule_across,
            grid,
            ACROSS.shared_bytes,
            &tensors,
            &[n as c_int, dv as c_int, c_int::from(keep)],
            &[],
        )?;
        Ok((states, news, keep.then_some(last)))
    }

    /// Whether the linear-inputs kernel takes a layer of this shape in this precision: bf16 or
    /// f32, whole value heads a key head, a token's channels and norms in 48 KiB.
    pub fn takes_linear_inputs(shape: &LinearAttentionConfig, kind: Kind) -> bool {
        let (channels, key_heads) = (shape.conv_dim(), shape.num_key_heads);
        matches!(kind, Kind::BFloat16 | Kind::Float)
            && key_heads > 0
            && shape.num_value_heads % key_heads == 0
            && shape.conv_kernel_dim >= 1
            && 4 * (channels + 2 * key_heads) <= 48 * 1024
    }

    /// A linear-attention layer's inputs to the delta rule: the causal depthwise convolution of
    /// `mixed` (rows, s, channels) after `previous` (rows, channels, kernel - 1) by `weight`
    /// (channels, 1, kernel), its SiLU, and the queries (L2-normalised, times `q_scale`), keys
    /// (L2-normalised) and values split into heads, each key head repeated for its value heads:
    /// q, k (rows, value heads, s, key_head_dim) and v (.., value_head_dim), in f32.
    pub fn linear_inputs(
        &self,
        mixed: &Tensor,
        previous: &Tensor,
        weight: &Tensor,
        shape: &LinearAttentionConfig,
        q_scale: f64,
    ) -> Result<(Tensor, Tensor, Tensor), String> {
        let (rows, s, channels) = (mixed.size()[0], mixed.size()[1], mixed.size()[2]);
        let taps = shape.conv_kernel_dim as i64;
        assert!(Self::takes_linear_inputs(shape, mixed.kind()) && channels == shape.conv_dim() as i64, "a layer the kernel does not take");
        let [mixed, previous, weight] = [mixed, previous, weight].map(|t| t.to_kind(mixed.kind()).contiguous());
        assert_eq!((previous.size(), weight.numel()), (vec![rows, channels, taps - 1], (channels * taps) as usize));
        let (kh, vh, dk, dv) =
            (shape.num_key_heads as i64, shape.num_value_heads as i64, shape.key_head_dim as i64, shape.value_head_dim as i64);
        let options = (Kind::Float, mixed.device());
        let (q, k, v) = (
            Tensor::empty([rows, vh, s, dk], options),
            Tensor::empty([rows, vh, s, dk], options),
            Tensor::empty([rows, vh, s, dv], options),
        );
        let which = usize::from(mixed.kind() == Kind::Float);
        let numbers = [s, kh, vh, dk, dv, taps].map(|x| x as c_int);
        let shared = 4 * (channels + 2 * kh);
        let grid = (s as c_uint, rows as c_uint);
        self.launch(
            &LINEAR_INPUTS[which],
            self.linear_inputs[which],
            grid,
            shared,
            &[&mixed, &previous, &weight, &q, &k, &v],
            &numbers,
            &[q_scale as f32],
        )?;
        Ok((q, k, v))
    }

    /// Launches `function` (`kernel`'s) on a `grid` of blocks of [`THREADS`] with `shared` bytes
    /// of dynamic shared memory, its arguments the `tensors`' data pointers, then the `numbers`,
    /// then the `reals`, in the kernel's order.
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        kernel: &KernelSpec,
        function: Handle,
        grid: (c_uint, c_uint),
        shared: i64,
        tensors: &[&Tensor],
        numbers: &[c_int],
        reals: &[f32],
    ) -> Result<(), String> {
        assert!(shared <= kernel.shared_bytes, "{}: {shared} bytes of shared memory, more than its {}", kernel.name, kernel.shared_bytes);
        let mut pointers: Vec<u64> = tensors.iter().map(|t| t.data_ptr() as u64).collect();
        let (mut numbers, mut reals) = (numbers.to_vec(), reals.to_vec());
        let mut args: Vec<Handle> = pointers.iter_mut().map(|p| (p as *mut u64).cast()).collect();
        args.extend(numbers.iter_mut().map(|x| (x as *mut c_int).cast::<c_void>()));
        args.extend(reals.iter_mut().map(|x| (x as *mut f32).cast::<c_void>()));
        self.make_context_current()?;
        let d = &self.driver;
        // SAFETY: the callers pass the arguments in the kernel's signature (pointers to tensors
        // that live until the call returns and, on libtorch's stream, until the kernel has run;
        // then ints, then floats); the block and shared memory are those it was written for. The
        // null stream is libtorch's.
        let code =
            unsafe { (d.launch)(function, grid.0, grid.1, 1, THREADS, 1, 1, shared as c_uint, null_mut(), args.as_mut_ptr(), null_mut()) };
        d.check(code, &format!("launching {}", kernel.name))
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

/// The suite's stand-in for the CUDA driver (`tests/kernels/`), which runs the kernels' own source
/// on the CPU: built from every `.cpp` there, with a fake cubin for each kernel.
#[cfg(test)]
pub(crate) mod stand_in {
    use std::path::{Path, PathBuf};

    use super::{CudaKernels, ACROSS, LINEAR_INPUTS, WITHIN};

    /// The stand-in driver built into `scratch`, and an empty folder for cubins beside it.
    pub fn driver(scratch: &Path) -> (PathBuf, PathBuf) {
        let (library, cubins) = (scratch.join("libcuda-standin.so"), scratch.join("cubins"));
        std::fs::create_dir(&cubins).unwrap();
        let sources_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kernels");
        let mut sources: Vec<PathBuf> = std::fs::read_dir(&sources_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cpp"))
            .collect();
        sources.sort();
        let built = std::process::Command::new("c++")
            .args(["-std=c++20", "-O2", "-pthread", "-shared", "-fPIC", "-o"])
            .arg(&library)
            .args(&sources)
            .output()
            .expect("a C++ compiler (c++) for the stand-in driver");
        assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
        (library, cubins)
    }

    /// The stand-in driver, and the kernels loaded through it from fake cubins.
    pub fn kernels(scratch: &Path) -> (PathBuf, CudaKernels) {
        let (library, cubins) = driver(scratch);
        for kernel in [&WITHIN, &ACROSS, &LINEAR_INPUTS[0]] {
            std::fs::write(cubins.join(format!("{}.sm_90.cubin", kernel.file)), b"FAKE-CUBIN").unwrap();
        }
        let kernels = CudaKernels::load(&library, &cubins, 0).unwrap();
        (library, kernels)
    }

    /// How many kernels the stand-in driver at `library` has run.
    pub fn launches(library: &Path) -> i32 {
        // SAFETY: the stand-in's own counter, `int standin_launches(void)`.
        unsafe {
            let standin = libloading::Library::new(library).unwrap();
            let count = standin.get::<unsafe extern "C" fn() -> i32>(b"standin_launches\0").unwrap();
            count()
        }
    }
}
