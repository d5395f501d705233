//! swan: a WebAssembly-sandboxed application server.
//!
//! Where a request goes, top to bottom (no module imports one above it):
//!
//! - [`server`] accepts connections (one runtime per core, or one shared),
//!   enforces connection limits and timeouts, and hands each request to
//! - [`app`], the request layer: a request id and span, the [`site`] by
//!   Host, the path normalised once, then
//! - a [`servlet`] route (a wasm guest run by the [`engine`] in a fresh
//!   sandboxed instance) or [`static_files`] (an in-memory cache with
//!   prebuilt headers). Every failure on the way is a
//!   [`request::RequestError`], turned into a response in one place.
//!
//! Beside them: [`config`] turns `swan.toml` and flags into a validated
//! [`Config`]; [`reload`] watches files and swaps new state in; [`body`]
//! is the response body type.
//!
//! The binary (`main.rs`) is a thin layer over [`serve`]: tests call the same
//! entry point with a socket bound to `127.0.0.1:0` and a shutdown future.

pub mod admin;
pub mod app;
pub mod body;
pub mod certs;
mod clock;
pub mod config;
pub mod engine;
mod file_stamp;
pub mod observe;
mod regular_file;
pub mod reload;
pub mod request;
pub mod server;
pub mod servlet;
pub mod site;
pub mod static_files;
pub mod store;
pub mod toolchain;

pub use app::App;
pub use config::{Config, ConfigError, Overrides};
pub use server::listener::{BindError, bind};
pub use server::{ServeError, serve};
