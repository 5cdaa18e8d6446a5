//! `bpals-release completions SHELL` and `bpals-release man --out DIR`: what an installed tool
//! brings beside the binary, generated from the same clap definitions as `--help`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    shell: clap_complete::Shell,
}

#[derive(Args)]
pub struct ManArgs {
    /// Folder to write the pages into (created if missing), for example ~/.local/share/man/man1.
    #[arg(long)]
    out: PathBuf,
}

pub fn completions(args: CompletionsArgs, mut command: clap::Command) -> anyhow::Result<ExitCode> {
    clap_complete::generate(args.shell, &mut command, "bpals-release", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

pub fn man(args: ManArgs, command: clap::Command) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    clap_mangen::generate_to(command, &args.out).with_context(|| format!("writing man pages into {}", args.out.display()))?;
    let pages = std::fs::read_dir(&args.out)?.filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "1"))).count();
    println!("wrote {pages} man pages into {} (try: man -l {}/bpals-release.1)", args.out.display(), args.out.display());
    Ok(ExitCode::SUCCESS)
}
