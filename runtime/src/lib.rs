//! swan: a WebAssembly-sandboxed application server.
//!
//! Where a request goes:
//! - [`server`] accepts connections (one runtime per core, or one shared),
//!   enforces connection limits and timeouts, and hands requests to
//! - [`app`], which picks the [`site`] by Host and checks request limits,
//!   then answers from a [`servlet`] (a wasm module run by the [`engine`],
//!   in a fresh sandboxed instance) or from [`static_files`] (an in-memory
//!   cache with prebuilt headers).
//! - [`config`] turns `swan.toml` and flags into a validated [`Config`];
//!   [`respond`] builds every response swan makes itself; [`body`] is the
//!   response body type.
//!
//! The binary (`main.rs`) is a thin layer over [`serve`]: tests call the same
//! entry point with a socket bound to `127.0.0.1:0` and a shutdown future.

pub mod app;
pub mod body;
mod clock;
pub mod config;
pub mod engine;
pub mod reload;
pub mod respond;
pub mod server;
pub mod servlet;
pub mod site;
pub mod static_files;

pub use app::App;
pub use config::{Config, ConfigError, Overrides};
pub use engine::Engine;
pub use server::listener::{BindError, bind};
pub use server::{ServeError, serve};
pub use site::Sites;
