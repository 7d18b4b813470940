//! The `kvmc` binary: parse arguments, run, map errors to exit codes.

use clap::Parser;

fn main() {
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
