//! A gated MLP's activation (`crates/vlm/src/cuda_kernels/gated_activation.cu`): act(gate) times up in one
//! pass, where libtorch's form takes two kernels and writes the activation out and reads it back.

use std::ffi::{c_int, c_uint};

use tch::{Kind, Tensor};

use super::{in_precision, CudaKernels, KernelSpec, THREADS};

/// bf16's, then f32's; no shared memory.
pub(super) const GATED_ACTIVATION: [KernelSpec; 2] = [
    KernelSpec { file: "gated_activation", name: "gated_activation_bf16", shared_bytes: 0 },
    KernelSpec { file: "gated_activation", name: "gated_activation_f32", shared_bytes: 0 },
];

/// Rows a block's threads take, each a column of every such row (a block an element each would
/// spend more on blocks than on the elements).
const ROWS_A_BLOCK: i64 = 8;

/// `t` (.., width) as rows: (rows, width) and the distance between rows, where its rows are
/// evenly spaced, its entries contiguous and the sizes fit the kernel's ints.
fn as_rows(t: &Tensor) -> Option<(Tensor, c_int)> {
    let width = *t.size().last()?;
    let rows = if t.dim() == 2 { t.shallow_clone() } else { t.f_view([-1, width]).ok()? };
    let row_stride = c_int::try_from(rows.stride()[0]).ok()?;
    let fits = c_int::try_from(rows.size()[0]).is_ok() && c_int::try_from(width).is_ok();
    (fits && (rows.stride()[1] == 1 || width == 1)).then_some((rows, row_stride))
}

impl CudaKernels {
    /// Whether the kernel takes this gate and up: one shape, bf16 or f32, each row's entries
    /// contiguous and its rows evenly spaced.
    pub fn takes_gated_activation(gate: &Tensor, up: &Tensor) -> bool {
        matches!(gate.kind(), Kind::BFloat16 | Kind::Float)
            && up.kind() == gate.kind()
            && gate.size() == up.size()
            && gate.numel() > 0
            && as_rows(gate).is_some()
            && as_rows(up).is_some()
    }

    /// SiLU(gate), or GELU's tanh form where `gelu_tanh`, times `up`: rounded as the model's
    /// precision stores each, as libtorch's two kernels round. The shape of `gate`, contiguous.
    pub fn gated_activation(&self, gate: &Tensor, up: &Tensor, gelu_tanh: bool) -> Tensor {
        assert!(Self::takes_gated_activation(gate, up), "a gated activation the kernel does not take: {:?} {:?}", gate.size(), up.size());
        let ((gate_rows, gate_row), (up_rows, up_row)) = (as_rows(gate).expect("taken"), as_rows(up).expect("taken"));
        let (rows, width) = (gate_rows.size()[0], gate_rows.size()[1]);
        let out = Tensor::empty(gate.size(), (gate.kind(), gate.device()));
        let grid = ((width + THREADS as i64 - 1) / THREADS as i64, ((rows + ROWS_A_BLOCK - 1) / ROWS_A_BLOCK).min(65_535));
        let numbers = [rows as c_int, width as c_int, gate_row, up_row, c_int::from(gelu_tanh)];
        let kernel = in_precision(&GATED_ACTIVATION, gate.kind());
        self.launch(kernel, (grid.0 as c_uint, grid.1 as c_uint), 0, &[&gate_rows, &up_rows, &out], &numbers, &[]);
        out
    }
}
