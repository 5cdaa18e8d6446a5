//! `bpals-release completions SHELL` and `bpals-release man --out DIR`: what an installed tool
//! brings beside the binary, generated from the same clap definitions as `--help`.

use std::path::{Path, PathBuf};
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

/// A man folder holds other programs' pages; what `man --out` must not overwrite is a
/// `bpals-release*.1` file that is not one of its own pages.
fn no_foreign_pages(dir: &Path) -> Result<(), String> {
    for entry in std::fs::read_dir(dir).map_err(|e| format!("cannot be listed: {e}"))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("bpals-release") && name.ends_with(".1")) {
            continue;
        }
        if !bpals_release::files::head_matches(&entry.path(), &|head| head.contains(".TH bpals-release")) {
            return Err(format!("holds {name}, which is not a man page this tool wrote"));
        }
    }
    Ok(())
}

pub fn man(args: ManArgs, command: clap::Command) -> anyhow::Result<ExitCode> {
    let claim = bpals_release::files::Claim { option: "--out", replaces: false, is_ours: &no_foreign_pages, protected: &[] };
    let _claimed = bpals_release::files::OutDir::claim(&args.out, &claim)?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    clap_mangen::generate_to(command, &args.out).with_context(|| format!("writing man pages into {}", args.out.display()))?;
    let pages = std::fs::read_dir(&args.out)?.filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "1"))).count();
    println!("wrote {pages} man pages into {} (try: man -l {}/bpals-release.1)", args.out.display(), args.out.display());
    Ok(ExitCode::SUCCESS)
}
