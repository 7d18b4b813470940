//! The `kvmc` binary: parse arguments, run, map errors to exit codes.

mod alloc;

use kvmc::cli::ReportFormat;
use kvmc::error::KvmcError;

/// mimalloc instead of the system allocator: replay and the checker allocate and free many
/// small vectors per step, and glibc's malloc made both markedly slower (docs/benchmarks.md,
/// "Round 3: the allocator"). Huge pages only where a table asks (`alloc`, "Round 8").
#[global_allocator]
static GLOBAL: alloc::Allocator = alloc::Allocator;

fn main() {
    if let Err(e) = alloc::init() {
        eprintln!("error: {e}");
        std::process::exit(kvmc::error::exit::USAGE);
    }
    // Behave like other command-line tools when the reader goes away (`kvmc list | head`):
    // die quietly of SIGPIPE instead of panicking on a failed print.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let argv: Vec<String> = std::env::args().collect();
    let parsed = kvmc::cli::command_for(&argv)
        .try_get_matches_from(&argv)
        .and_then(|m| <kvmc::cli::Cli as clap::FromArgMatches>::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { kvmc::error::exit::USAGE } else { kvmc::error::exit::OK };
            let _ = e.print();
            if e.use_stderr() {
                let args: Vec<String> = std::env::args().collect();
                // clap's first line, without its "error: " prefix.
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default();
                let err = KvmcError::Usage(first.trim_start_matches("error: ").to_string());
                report_error(&err, kvmc::cli::report_format_of_args(&args));
            }
            std::process::exit(code);
        }
    };
    let format = cli.report_format();
    match kvmc::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e}");
            report_error(&e, format);
            std::process::exit(e.exit_code());
        }
    }
}

/// With `--format json` or `junit`, an error is also a report on stdout (the text stays on
/// stderr): a consumer that reads stdout sees why nothing ran (docs/exit-codes.md).
fn report_error(e: &KvmcError, format: ReportFormat) {
    use std::io::Write;
    let out = match format {
        ReportFormat::Text => return,
        ReportFormat::Json => format!("{:#}\n", e.to_json()),
        ReportFormat::Junit => e.to_junit(),
    };
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
}
