//! The `kvmc` binary: parse arguments, run, map errors to exit codes.

use clap::Parser;

/// mimalloc instead of the system allocator: replay and the checker allocate and free many
/// small vectors per step, and glibc's malloc made both markedly slower (docs/benchmarks.md,
/// "Round 3: the allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`: the Rust crate names no constant for it, and in
/// `mimalloc.h`'s `mi_option_e` (v3, the crate's default build; v2 alike) it comes just before
/// `use_numa_nodes`. A test below checks that this index holds the purge delay's default.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = libmimalloc_sys::mi_option_use_numa_nodes - 1;

fn main() {
    // Never hand freed memory back to the OS: a run's memory use is near its peak throughout,
    // and purged pages came back as page faults (a fifth of the flagship check's time).
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
    }
    // Behave like other command-line tools when the reader goes away (`kvmc list | head`):
    // die quietly of SIGPIPE instead of panicking on a failed print.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match kvmc::cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { kvmc::error::exit::USAGE } else { kvmc::error::exit::OK };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    match kvmc::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(e.exit_code());
        }
    }
}

#[cfg(test)]
mod tests {
    /// `MI_OPTION_PURGE_DELAY` names the purge delay: mimalloc v3's default for it is 1000 ms
    /// (a crate update that renumbered the options would fail here, not silently set another).
    #[test]
    fn purge_delay_option_index() {
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) }, 1000);
    }
}
