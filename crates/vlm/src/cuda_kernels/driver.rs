//! The CUDA driver's entry points the kernels need, opened at run time (CUDA's driver API, by
//! their exported names): no CUDA toolkit or crate where the engine runs, only the node's driver.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::Path;

use libloading::Library;

pub(super) type CuResult = c_int;
pub(super) type Handle = *mut c_void;

/// The driver's entry points, and the library that holds them.
pub(super) struct Driver {
    pub(super) init: unsafe extern "C" fn(c_uint) -> CuResult,
    pub(super) device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    pub(super) device_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult,
    pub(super) context_current: unsafe extern "C" fn(*mut Handle) -> CuResult,
    pub(super) primary_context_retain: unsafe extern "C" fn(*mut Handle, c_int) -> CuResult,
    pub(super) set_context_current: unsafe extern "C" fn(Handle) -> CuResult,
    pub(super) module_load_data: unsafe extern "C" fn(*mut Handle, *const c_void) -> CuResult,
    pub(super) module_function: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CuResult,
    pub(super) function_attribute: unsafe extern "C" fn(Handle, c_int, c_int) -> CuResult,
    #[allow(clippy::type_complexity)]
    pub(super) launch:
        unsafe extern "C" fn(Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut Handle, *mut Handle) -> CuResult,
    pub(super) error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    /// Kept loaded for as long as the entry points above are used.
    _library: Library,
}

pub(super) const COMPUTE_CAPABILITY_MAJOR: c_int = 75;
pub(super) const COMPUTE_CAPABILITY_MINOR: c_int = 76;
pub(super) const MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;

impl Driver {
    pub(super) fn open(path: &Path) -> Result<Driver, String> {
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
    pub(super) fn check(&self, code: CuResult, doing: &str) -> Result<(), String> {
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
