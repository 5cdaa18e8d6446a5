//! A heap budget for untrusted work that runs inside the process: a chat template read from a
//! checkpoint. A template is a program; a step count ("fuel") stops its loops, but a string
//! doubled 27 times takes 27 steps and gigabytes. So the process's allocator counts what each
//! thread allocates, and while [`with_budget`] runs, an allocation past the budget ends the
//! process with one line naming the work and the limit (exit code 2). An allocation cannot fail
//! softly: the alternative to ending the process is the machine running out of memory.
//!
//! Outside a budget the counting costs one thread-local read per allocation. libtorch's tensors
//! do not come through here (they have their own allocator).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The process's allocator: the system's, with each thread's budget kept.
pub struct BudgetedAllocator;

#[global_allocator]
static ALLOCATOR: BudgetedAllocator = BudgetedAllocator;

/// What a thread under a budget may still allocate, and the line to print when it runs out.
#[derive(Clone, Copy)]
struct Budget {
    left: usize,
    limit: usize,
    /// The message, owned by [`with_budget`]'s frame for as long as the budget is on.
    message: (*const u8, usize),
}

thread_local! {
    static BUDGET: Cell<Option<Budget>> = const { Cell::new(None) };
}

/// Charges `bytes` to this thread's budget, if it has one; past the budget the process ends.
fn charge(bytes: usize) {
    let _ = BUDGET.try_with(|cell| {
        if let Some(mut budget) = cell.get() {
            if bytes > budget.left {
                exhausted(budget);
            }
            budget.left -= bytes;
            cell.set(Some(budget));
        }
    });
}

/// Gives `bytes` back to this thread's budget (never above its limit: memory allocated before
/// the budget was set is not the work's to spend).
fn refund(bytes: usize) {
    let _ = BUDGET.try_with(|cell| {
        if let Some(mut budget) = cell.get() {
            budget.left = budget.left.saturating_add(bytes).min(budget.limit);
            cell.set(Some(budget));
        }
    });
}

/// Writes the budget's message to stderr without allocating, and ends the process.
fn exhausted(budget: Budget) -> ! {
    let (ptr, len) = budget.message;
    // SAFETY: the message outlives the budget (see `with_budget`); write(2) and _exit(2) do not
    // allocate.
    unsafe {
        libc::write(2, ptr.cast(), len);
        libc::_exit(2);
    }
}

// SAFETY: every call goes to the system allocator unchanged; the budget only counts.
unsafe impl GlobalAlloc for BudgetedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        refund(layout.size());
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            charge(new_size - layout.size());
        } else {
            refund(layout.size() - new_size);
        }
        System.realloc(ptr, layout, new_size)
    }
}

/// Runs `work` on this thread with at most `limit` bytes of new heap; past it the process prints
/// `message` (one line, as given) and exits with code 2. Budgets do not nest: an inner one
/// replaces the outer until it ends.
pub fn with_budget<T>(limit: usize, message: &str, work: impl FnOnce() -> T) -> T {
    let line = format!("error: {message}\n");
    let budget = Budget { left: limit, limit, message: (line.as_ptr(), line.len()) };
    let outer = BUDGET.with(|cell| cell.replace(Some(budget)));
    // Restores the outer budget however `work` ends (a panic unwinding through it included).
    struct Restore(Option<Budget>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = BUDGET.try_with(|cell| cell.set(self.0));
        }
    }
    let restore = Restore(outer);
    let out = work();
    drop(restore);
    drop(line);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn work_within_its_budget_runs_and_the_budget_ends_with_it() {
        let n = super::with_budget(1 << 20, "unused", || (0..1000).map(|i| i.to_string()).collect::<Vec<_>>().len());
        assert_eq!(n, 1000);
        // No budget now: a large allocation is fine.
        assert_eq!(vec![0u8; 8 << 20].len(), 8 << 20);
    }
}
