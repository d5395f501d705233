//! The `swan` command line: `swan serve` and `swan check`.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use swan::{Config, ConfigError, Overrides};

/// swan: static files from memory and WebAssembly servlets, sandboxed.
#[derive(Debug, Parser)]
#[command(name = "swan", version, about, propagate_version = true)]
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
}

#[derive(Debug, Args)]
struct ConfigArgs {
    /// Configuration file [default: ./swan.toml if present].
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on, such as 127.0.0.1:8080; repeat for several.
    /// Replaces `listen` in [server].
    #[arg(long, short = 'l', value_name = "ADDR")]
    listen: Vec<String>,
    /// Folder of static files of the default site. Replaces its `root`.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Folder of .wasm servlets of the default site. Replaces its `servlets`.
    #[arg(long, value_name = "DIR")]
    servlets: Option<PathBuf>,
}

impl ConfigArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen.clone(),
            root: self.root.clone(),
            servlets: self.servlets.clone(),
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
    };
    let overrides = args.overrides();
    let config = match args.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Serve(_) => cli::serve::serve(config, overrides),
        Command::Check(_) => cli::check::check(&config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal, and never with NO_COLOR set.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
