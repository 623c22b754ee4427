//! `envc completions SHELL` and `envc man DIR`: shell completions and man pages, made from
//! the same clap definitions the command line parses with, so they cannot drift from it.
//! The command line hands its definition in (`Cli::command()`), so this module, below it,
//! does not import it back.

use std::path::Path;

use crate::exit::{Exit, Failure, Outcome};
use crate::output;

/// The completion script for `shell`, on stdout (`envc completions bash > …`).
pub fn completions(mut cmd: clap::Command, shell: clap_complete::Shell) -> Outcome {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "envc", &mut out);
    match std::io::Write::write_all(&mut std::io::stdout().lock(), &out) {
        // A reader that had enough (`| head`) is not a failure.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::Errors {
            errors: vec![format!("cannot write the completions: {e}")],
            exit: Exit::Failed,
        }),
        _ => Ok(Exit::Ok),
    }
}

/// `envc.1` and one page per subcommand (`envc-build.1`, `envc-store-verify.1`, …) in `dir`,
/// each with EXIT STATUS and ENVIRONMENT sections.
pub fn man(mut cmd: clap::Command, dir: &Path) -> Outcome {
    let fail = |what: String| Failure::Errors {
        errors: vec![what],
        exit: Exit::Failed,
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
    cmd.build();
    let mut pages = Vec::new();
    collect(&cmd, "envc", &mut pages);
    for (name, page) in &pages {
        let mut bytes = Vec::new();
        clap_mangen::Man::new(page.clone())
            .render(&mut bytes)
            .map_err(|e| fail(format!("cannot render {name}.1: {e}")))?;
        let page = crate::help::with_man_sections(&String::from_utf8_lossy(&bytes));
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, page)
            .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    }
    output::line(format!(
        "wrote {} man pages to {}",
        pages.len(),
        dir.display()
    ));
    Ok(Exit::Ok)
}

/// `cmd` as page `name`, then each subcommand's as `name-sub`, depth first (a built
/// command's subcommands are displayed as `envc-build`, which is what the pages say).
fn collect(cmd: &clap::Command, name: &str, pages: &mut Vec<(String, clap::Command)>) {
    pages.push((name.to_string(), cmd.clone()));
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        collect(sub, &format!("{name}-{}", sub.get_name()), pages);
    }
}
