//! `kvmc completions SHELL` and `kvmc man`: what an installed kvmc gives the shell and `man`
//! (README, "Install"). Both are generated from the command line's own definition.

use crate::error::{KvmcError, Result};
use clap::{Args, CommandFactory};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write kvmc.1 and one page per subcommand (kvmc-check.1, ...) into this directory
    /// instead of printing kvmc.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub fn completions(a: CompletionsArgs) -> Result<i32> {
    let mut cmd = super::Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "kvmc", &mut std::io::stdout());
    Ok(0)
}

pub fn man(a: ManArgs) -> Result<i32> {
    let cmd = super::Cli::command();
    match a.dir {
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut buf).map_err(|e| KvmcError::Internal(e.to_string()))?;
            use std::io::Write;
            let _ = std::io::stdout().lock().write_all(&buf);
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|e| KvmcError::io(&dir, e))?;
            clap_mangen::generate_to(cmd, &dir).map_err(|e| KvmcError::io(&dir, e))?;
            eprintln!("man pages written to {} (kvmc.1, kvmc-check.1, ...)", dir.display());
        }
    }
    Ok(0)
}
