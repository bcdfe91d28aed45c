//! Man pages and shell completions, generated from a binary's own clap definition so that they
//! cannot drift from it. A binary offers them by flattening [`Manual`] into its subcommands:
//! `completions <shell>` prints a completion script and the hidden `man --dir DIR` writes the
//! pages, one per command, as the Debian package and the release archive carry them.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, roman};

/// The section of the manual every page goes in: user commands.
const SECTION: &str = "1";

/// The subcommands that describe the binary itself.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Manual {
    /// Print a shell completion script on stdout.
    ///
    /// The Debian package installs the bash, zsh and fish scripts. By hand: bash's as
    /// `/usr/share/bash-completion/completions/NAME`, zsh's as `_NAME` in a directory of
    /// `$fpath`, fish's as `~/.config/fish/completions/NAME.fish`, where NAME is this program's.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Write the man pages, one per command, into DIR (created if missing).
    #[command(hide = true)]
    Man {
        /// Where the pages go.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
}

/// A section of a binary's main page beyond those clap describes, such as FILES or EXIT STATUS.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    /// The heading, in capitals by convention.
    pub heading: &'static str,
    /// Its paragraphs, each a line of plain text.
    pub paragraphs: &'static [&'static str],
}

impl Manual {
    /// Does what the subcommand asks for `cmd` (the binary's whole command line, as
    /// `Cli::command()` gives it); `extra` goes on the main page only. A completion script goes
    /// to `out`.
    pub fn run(
        &self,
        cmd: clap::Command,
        extra: &[Section],
        out: &mut dyn Write,
    ) -> io::Result<()> {
        match self {
            Self::Completions { shell } => completions(*shell, cmd, out),
            Self::Man { dir } => man_pages(cmd, extra, dir),
        }
    }
}

/// The completion script for `shell`, written whole or not at all: clap_complete panics on a
/// failed write, so it writes into memory first.
fn completions(shell: Shell, mut cmd: clap::Command, out: &mut dyn Write) -> io::Result<()> {
    let name = cmd.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    out.write_all(&script)
        .and_then(|()| out.flush())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot write the completion script: {e}")))
}

/// Writes `NAME.1`, and `NAME-COMMAND.1` for every visible subcommand (recursively), into `dir`.
fn man_pages(cmd: clap::Command, extra: &[Section], dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let source = format!("{} {}", cmd.get_name(), crate::version::VERSION);
    page(&cmd, &source, dir, |man, w| {
        main_page(man, extra, w).and_then(|()| man.render_version_section(w))
    })?;
    let mut pending = visible_subcommands(&cmd);
    while let Some(sub) = pending.pop() {
        pending.extend(visible_subcommands(&sub));
        page(&sub, &source, dir, |man, w| man.render(w))?;
    }
    Ok(())
}

fn visible_subcommands(cmd: &clap::Command) -> Vec<clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect()
}

/// One page of `cmd` into `dir`, its body written by `body`.
fn page(
    cmd: &clap::Command,
    source: &str,
    dir: &Path,
    body: impl Fn(&Man, &mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let man = Man::new(cmd.clone()).section(SECTION).source(source);
    let path = dir.join(man.get_filename());
    let mut text = Vec::new();
    body(&man, &mut text)?;
    std::fs::write(&path, text)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// The main page: what clap knows, then the binary's own sections (the version last).
fn main_page(man: &Man, extra: &[Section], w: &mut dyn Write) -> io::Result<()> {
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    man.render_subcommands_section(w)?;
    for section in extra {
        let mut roff = Roff::default();
        roff.control("SH", [section.heading]);
        for (i, paragraph) in section.paragraphs.iter().enumerate() {
            if i > 0 {
                roff.control("PP", []);
            }
            roff.text([roman(*paragraph)]);
        }
        roff.to_writer(w)?;
    }
    Ok(())
}
