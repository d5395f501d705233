//! The `swan` command line: `swan serve`, `swan check`, `swan new` and
//! `swan completions`.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.

mod cli;

use cli::{errln, outln};

/// jemalloc, purging freed pages in a background thread (settings in
/// `.cargo/config.toml`): memory taken by a spike of connections goes back
/// to the system within seconds, where glibc malloc kept it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use swan::{Config, ConfigError, Overrides};

/// swan: static files from memory and WebAssembly servlets, sandboxed.
#[derive(Debug, Parser)]
#[command(
    name = "swan",
    version,
    about,
    propagate_version = true,
    after_help = "Examples:
  swan serve                          serve ./www (or ./swan.toml) on 127.0.0.1:8080
  swan serve --dev                    the same, building servlet sources on every change
  swan new hello --lang rust          a Rust servlet in ./servlets/hello (then: swan serve --dev)
  swan new api --lang js              a JavaScript component
  swan new --list                     languages and their toolchains
  swan check --config swan.toml       validate and show what would be served
  swan completions bash > /etc/bash_completion.d/swan

Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the configured sites (default: ./www on 127.0.0.1:8080).
    Serve(ConfigArgs),
    /// Validate the configuration and print what would be served.
    Check(ConfigArgs),
    /// Create a servlet source folder that builds and answers as it is.
    New(NewArgs),
    /// Print a shell completion script.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
struct NewArgs {
    /// The servlet's name: its route (/NAME) and folder.
    #[arg(required_unless_present = "list")]
    name: Option<String>,
    /// rust, c, assemblyscript, zig, go (native); rust, js, python (components).
    #[arg(long, short = 'l', required_unless_present = "list")]
    lang: Option<String>,
    /// native (swan's ABI) or component (wasi:http); the language's own by default.
    #[arg(long, value_parser = ["native", "component"])]
    kind: Option<String>,
    /// Folder to create it in [default: the default site's servlets folder].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Configuration file to find the servlets folder in.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// List the languages and whether their toolchains are installed.
    #[arg(long)]
    list: bool,
}

#[derive(Debug, Args)]
struct ConfigArgs {
    /// Configuration file [default: ./swan.toml if present].
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on, such as 127.0.0.1:8080; repeat for several.
    /// Replaces the plain listeners of `listen` in [server]; TLS listeners stay.
    #[arg(long, short = 'l', value_name = "ADDR")]
    listen: Vec<String>,
    /// Folder of static files of the default site. Replaces its `root`.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Folder of .wasm servlets of the default site. Replaces its `servlets`.
    #[arg(long, value_name = "DIR")]
    servlets: Option<PathBuf>,
    /// Development mode (as `mode = "development"`): build servlet sources
    /// on change, show build errors on their routes.
    #[arg(long)]
    dev: bool,
    /// File to write the serving process's id to once it serves (removed
    /// when it stops). Replaces `pid_file` in [server].
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
}

impl ConfigArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen.clone(),
            root: self.root.clone(),
            servlets: self.servlets.clone(),
            dev: self.dev,
            pid_file: self.pid_file.clone(),
            servlets_to_be_made: false,
        }
    }

    fn load(&self) -> Result<Config, ConfigError> {
        Config::load(self.config.as_deref(), &self.overrides())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    // Panics go to the log like everything else; the request layer turns a
    // panic in one request into a 500 for that request only.
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(
            thread = std::thread::current().name().unwrap_or("?"),
            "panic: {info}"
        );
    }));
    let args = match &cli.command {
        Command::Serve(a) | Command::Check(a) => a,
        Command::New(a) => return new(a),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            // Into memory first: generate() panics on a failed write.
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut command, "swan", &mut script);
            let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
            return ExitCode::SUCCESS;
        }
    };
    let overrides = args.overrides();
    let config = match args.load() {
        Ok(c) => c,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Serve(_) => cli::serve::serve(config, overrides),
        Command::Check(_) => cli::check::check(&config),
        Command::New(_) | Command::Completions { .. } => Ok(()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// `swan new`.
fn new(args: &NewArgs) -> ExitCode {
    if args.list {
        cli::new::list();
        return ExitCode::SUCCESS;
    }
    let (Some(name), Some(lang)) = (&args.name, &args.lang) else {
        errln!("error: swan new NAME --lang LANG (swan new --list)");
        return ExitCode::from(2);
    };
    let lang =
        match swan::toolchain::Lang::parse(lang, args.kind.as_deref().map(|k| k == "component")) {
            Ok(l) => l,
            Err(e) => {
                errln!("error: {e}");
                return ExitCode::from(2);
            }
        };
    // Where it goes, and the command that serves it from there.
    let config_flag = args
        .config
        .as_ref()
        .map(|f| format!(" --config {}", shell_word(f)))
        .unwrap_or_default();
    let default_port = swan::config::DEFAULT_LISTEN
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .unwrap_or(8080);
    let (dir, serve_flags, port) = match (&args.dir, &args.config) {
        (Some(d), _) => (
            d.clone(),
            format!("{config_flag} --servlets {}", shell_word(d)),
            default_port,
        ),
        // No configuration at all: `servlets/` and `www/` in this folder,
        // which the built-in defaults serve.
        (None, None)
            if Path::new(swan::config::DEFAULT_CONFIG_FILE)
                .symlink_metadata()
                .is_err() =>
        {
            if let Err(e) = std::fs::create_dir_all(swan::config::DEFAULT_ROOT) {
                errln!(
                    "error: cannot create the site folder {}: {e}",
                    swan::config::DEFAULT_ROOT
                );
                return ExitCode::from(1);
            }
            (
                PathBuf::from(swan::config::DEFAULT_SERVLETS),
                String::new(),
                default_port,
            )
        }
        (None, file) => match Config::load(
            file.as_deref(),
            &Overrides {
                servlets_to_be_made: true,
                ..Overrides::default()
            },
        ) {
            Ok(c) => {
                let port = c
                    .server
                    .listen
                    .iter()
                    .find(|l| !l.tls && l.addr.port() != 0)
                    .map_or(default_port, |l| l.addr.port());
                match c.default_site().and_then(|s| s.servlets.clone()) {
                    Some(dir) => (dir, config_flag, port),
                    None => {
                        errln!(
                            "error: the default site has no servlets folder: add `servlets = \"servlets\"` to its [[site]], or say where the servlet goes with --dir DIR"
                        );
                        return ExitCode::from(2);
                    }
                }
            }
            Err(e) => {
                errln!("{e}");
                errln!("fix the configuration, or say where the servlet goes with --dir DIR");
                return ExitCode::from(2);
            }
        },
    };
    match cli::new::create(name, lang, &dir) {
        Ok(dest) => {
            outln!(
                "created {} ({} {}; edit {})",
                dest.display(),
                lang.name(),
                if lang.component() {
                    "component"
                } else {
                    "native servlet"
                },
                dest.join(lang.main_file()).display()
            );
            outln!("run:  swan serve --dev{serve_flags}");
            outln!(
                "then: curl 'http://127.0.0.1:{port}/{name}?name=Ada'   -> Hello, Ada! GET /{name}"
            );
            if !lang.available() {
                outln!(
                    "note: its toolchain ({}) is missing; install it with:
  {}",
                    lang.needs(),
                    lang.install_hint()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("error: {e:#}");
            // A name refused or taken is the command's usage; anything
            // else (a folder that cannot be written) is a failure.
            let usage = e.downcast_ref::<cli::new::Refused>().is_some();
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}

/// `path` as one shell word: quoted when it holds anything but plain
/// characters.
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // notify's own notes (a watch removed with its folder) are not
        // news for an operator; nor are h2's warnings about a client it
        // ends with GOAWAY (a rapid-reset flood): one line per connection,
        // naming no peer, as fast as a client can open them; nor wasmtime's
        // note of a module's malformed name section (the module loads; the
        // note names no module, and comes once per compile).
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("info,notify=warn,h2=error,wasmtime_environ=error")
        });
    // Colours only on a terminal, and never with NO_COLOR set.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(move || LogOutput { ansi: colour })
        // A line that cannot be written is dropped: tracing's own report of
        // it would go to the same standard error, and panic there.
        .log_internal_errors(false)
        .with_target(false)
        .init();
}

/// Standard error for the log. A line it cannot take (its reader went
/// away: `swan serve 2>&1 | tee` stopped, a log collector restarting) is
/// dropped, never an error that tracing reports, panics on, and aborts
/// the whole server with. Each event comes whole (the formatter writes it
/// with one `write_all`) and goes out as one line, whatever its fields
/// carry (`observe::one_line`).
struct LogOutput {
    /// The formatter colours its lines: their ESC bytes pass.
    ansi: bool,
}

impl std::io::Write for LogOutput {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let out = swan::observe::one_line::one_line(line, self.ansi);
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), &out);
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::Write::flush(&mut std::io::stderr());
        Ok(())
    }
}
