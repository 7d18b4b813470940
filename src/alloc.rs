//! The binary's memory allocator: mimalloc, with transparent huge pages only where a table
//! asks for them.
//!
//! A module of the binary, not of the library (the library has no `unsafe` allocator):
//! `src/main.rs` installs [`Allocator`] as the global allocator and calls [`init`] first
//! thing. The library asks for huge pages through `kvmc::hint::huge_pages`; its own tests and
//! other programs keep their allocator, so there the hint changes nothing.
//!
//! # Why huge pages are opt-in
//! Left to itself, mimalloc asks the kernel for transparent huge pages (`MADV_HUGEPAGE`) on
//! its whole arena. That spares the TLB, but on the virtual machines kvmc's benchmarks and CI
//! run on, the first touch of cold memory in 2 MiB pages costs 9 to 10 ms of kernel time per
//! MiB, 10 to 20 times the cost in 4 KiB pages (docs/benchmarks.md, "Round 8"). A run pays it
//! once per huge page of its peak memory: 0.6 to 0.9 s of a cold trace replay, and 5 to 6 s
//! of the flagship check's 20 s.
//!
//! So [`init`] turns mimalloc's huge pages off, and the one table that is read at random
//! several times per byte, the host tier's key map in replay, asks for them itself through
//! `kvmc::hint::huge_pages` (the replay's TLB misses there cost about what its kernel time saved). The
//! checker's large tables do not: in huge pages they cost kernel time and saved nothing.
//! `KVMC_HUGE_PAGES` chooses another policy ([`init`]).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// mimalloc's `mi_option_e` indices that the Rust crate names no constant for. Counted in
/// `mimalloc.h` (v3, the crate's default build) from the end of the enum; the tests below
/// check each index against its option's default value.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = libmimalloc_sys::mi_option_use_numa_nodes - 1;
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = libmimalloc_sys::_mi_option_last - 4;

/// Allocations at least this large, made inside `kvmc::hint::huge_pages`, get `MADV_HUGEPAGE` on the
/// 2 MiB pages they wholly contain (a smaller one may contain none).
const HUGE_MIN: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

/// `KVMC_HUGE_PAGES=none`: `kvmc::hint::huge_pages` is ignored.
static REFUSE_HUGE: AtomicBool = AtomicBool::new(false);

/// mimalloc, plus the `kvmc::hint::huge_pages` hint.
pub struct Allocator;

impl Allocator {
    #[inline]
    fn placed(p: *mut u8, size: usize) -> *mut u8 {
        if size >= HUGE_MIN && !p.is_null() && kvmc::hint::wants_huge_pages() && !REFUSE_HUGE.load(Relaxed) {
            advise_huge(p, size);
        }
        p
    }
}

// SAFETY: every call is forwarded to mimalloc unchanged; `placed` only gives the kernel a
// paging hint for memory the allocation owns.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::placed(unsafe { mimalloc::MiMalloc.alloc(layout) }, layout.size())
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::placed(unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }, layout.size())
    }
    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::placed(unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }, new_size)
    }
}

/// `MADV_HUGEPAGE` on the whole 2 MiB pages inside `[p, p + size)`.
fn advise_huge(p: *mut u8, size: usize) {
    #[cfg(target_os = "linux")]
    {
        let start = (p as usize).next_multiple_of(HUGE_PAGE);
        let end = (p as usize + size) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            // SAFETY: the range lies inside one live allocation; advice does not change its
            // contents. A failure only means no huge pages.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, size);
}

/// Set mimalloc's policy; call first thing in `main`, before the heap grows.
///
/// - Freed memory is never handed back to the OS (`purge_delay = -1`): a run's memory use
///   stays near its peak anyway, and purged pages came back as page faults.
/// - No transparent huge pages unless asked for (`kvmc::hint::huge_pages`). The option stops mimalloc
///   from advising arenas it reserves from now on; the arena it reserved before `main` (for
///   the runtime's first allocations) is un-advised here.
///
/// The environment variable `KVMC_HUGE_PAGES` chooses another policy: `all` keeps
/// mimalloc's own (huge pages everywhere: faster where faulting them in is cheap, as on most
/// bare-metal Linux machines), `none` refuses them even to `kvmc::hint::huge_pages`, `tables` (or
/// unset) is the one above. Any other value is an error, after the default policy is set.
pub fn init() -> Result<(), String> {
    let policy = std::env::var("KVMC_HUGE_PAGES").unwrap_or_default();
    // SAFETY: plain option setter of the linked mimalloc.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    if policy == "all" {
        return Ok(());
    }
    // SAFETY: as above.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
    #[cfg(target_os = "linux")]
    unadvise_first_arena();
    match policy.as_str() {
        "" | "tables" => Ok(()),
        "none" => {
            REFUSE_HUGE.store(true, Relaxed);
            Ok(())
        }
        other => Err(format!("KVMC_HUGE_PAGES must be all, tables or none, not {other:?}")),
    }
}

/// `MADV_NOHUGEPAGE` on the mapping that holds a fresh heap allocation (mimalloc's first
/// arena), found in `/proc/self/maps`. Best effort: without the file nothing changes.
#[cfg(target_os = "linux")]
fn unadvise_first_arena() {
    let probe = Box::new(0u64);
    let at = &*probe as *const u64 as usize;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    let range = maps.lines().find_map(|l| {
        let (a, b) = l.split_whitespace().next()?.split_once('-')?;
        let (a, b) = (usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?);
        (a <= at && at < b).then_some((a, b))
    });
    if let Some((a, b)) = range {
        // SAFETY: the range is a whole mapping of this process; advice does not change its
        // contents.
        unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_NOHUGEPAGE) };
    }
    drop(probe);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option indices name the options meant: mimalloc v3's purge delay defaults to
    /// 1000 ms, `allow_thp` to 1, and the option two after it (`arena_max_object_size`) to
    /// 2 GiB in KiB. A crate update that renumbered the options fails here instead of
    /// silently setting another option.
    #[test]
    fn option_indices() {
        let get = |o| unsafe { libmimalloc_sys::mi_option_get(o) };
        assert_eq!(get(MI_OPTION_PURGE_DELAY), 1000);
        assert_eq!(get(MI_OPTION_ALLOW_THP), 1);
        assert_eq!(get(MI_OPTION_ALLOW_THP + 2), 2 << 20);
    }

    /// With the hint on, a large allocation is usable, zeroed when asked, and keeps its bytes
    /// through a reallocation (the advice must never touch the caller's memory).
    #[test]
    fn advice_on_a_large_allocation() {
        let size = HUGE_MIN + 123;
        let layout = Layout::from_size_align(size, 8).unwrap();
        let p = kvmc::hint::huge_pages(|| unsafe { Allocator.alloc_zeroed(layout) });
        assert!(!p.is_null());
        let s = unsafe { std::slice::from_raw_parts_mut(p, size) };
        assert!(s.iter().all(|&b| b == 0));
        s[size - 1] = 7;
        let q = unsafe { Allocator.realloc(p, layout, 2 * size) };
        assert_eq!(unsafe { *q.add(size - 1) }, 7);
        unsafe { Allocator.dealloc(q, Layout::from_size_align(2 * size, 8).unwrap()) };
    }
}
