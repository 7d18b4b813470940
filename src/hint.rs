//! Memory hints from the library to the binary's allocator (`src/alloc.rs`, which is the
//! binary's, not the library's): a scope inside which large allocations would like
//! transparent huge pages. Without that allocator (the library used from another program, the
//! library's tests) the hint changes nothing.

use std::cell::Cell;

thread_local! {
    /// Inside [`huge_pages`] on this thread. Constant-initialised and without a destructor,
    /// so reading it from an allocator never allocates and never fails.
    static WANT_HUGE: Cell<bool> = const { Cell::new(false) };
}

/// Run `f`; large allocations it makes on this thread are backed by transparent huge pages
/// where the allocator and the kernel allow them (a hint: nothing changes but speed).
pub fn huge_pages<R>(f: impl FnOnce() -> R) -> R {
    let before = WANT_HUGE.with(|w| w.replace(true));
    let r = f();
    WANT_HUGE.with(|w| w.set(before));
    r
}

/// Is this thread inside [`huge_pages`]? (For the allocator.)
#[inline]
pub fn wants_huge_pages() -> bool {
    WANT_HUGE.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_scope_nests_and_restores() {
        assert!(!wants_huge_pages());
        let inner = huge_pages(|| {
            huge_pages(|| ());
            wants_huge_pages()
        });
        assert!(inner, "a nested scope must not end the outer one");
        assert!(!wants_huge_pages());
    }
}
