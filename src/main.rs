//! The `kvmc` binary: parse arguments, run, map errors to exit codes.

use clap::Parser;

/// mimalloc instead of the system allocator: replay and the checker allocate and free many
/// small vectors per step, and glibc's malloc made both markedly slower (docs/benchmarks.md,
/// "Round 3: the allocator"). Huge pages only where a table asks (`kvmc::alloc`, "Round 8").
#[global_allocator]
static GLOBAL: kvmc::alloc::Allocator = kvmc::alloc::Allocator;

fn main() {
    if let Err(e) = kvmc::alloc::init() {
        eprintln!("error: {e}");
        std::process::exit(kvmc::error::exit::USAGE);
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
