//! What components may import, one linker per engine.

use wasmtime::component::Linker;

use super::host::ComponentHost;
use super::keyvalue;
use crate::engine::{Engine, PerTier, Tier};

/// What components may import: per compiler tier (WASI 0.2), and on the
/// concurrent engine (WASI 0.2 and 0.3), for routes that allow p3. The p3
/// interfaces are linked nowhere else, so no other path reaches
/// wasmtime's experimental p3 host.
pub(crate) struct Linkers {
    tiers: PerTier<Linker<ComponentHost>>,
    #[cfg(feature = "p3")]
    pub(super) concurrent: Linker<ComponentHost>,
}

impl Linkers {
    pub(crate) fn new(engine: &Engine) -> wasmtime::Result<Linkers> {
        Ok(Linkers {
            tiers: PerTier::new(engine, |e| linker(e, false))?,
            #[cfg(feature = "p3")]
            concurrent: linker(engine.concurrent(), true)?,
        })
    }

    pub(super) fn get(&self, tier: Tier) -> &Linker<ComponentHost> {
        self.tiers.get(tier)
    }
}

/// A linker for `engine`: WASI 0.2, wasi:http 0.2, wasi:config, the
/// key-value stores, and with `p3` WASI 0.3 and wasi:http 0.3 beside them
/// (the interfaces are versioned apart).
fn linker(engine: &wasmtime::Engine, p3: bool) -> wasmtime::Result<Linker<ComponentHost>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    #[cfg(feature = "p3")]
    if p3 {
        wasmtime_wasi::p3::add_to_linker(&mut linker)?;
        wasmtime_wasi_http::p3::add_to_linker(&mut linker)?;
    }
    #[cfg(not(feature = "p3"))]
    let _ = p3;
    wasmtime_wasi_config::add_to_linker(&mut linker, ComponentHost::config)?;
    keyvalue::add_to_linker(&mut linker, ComponentHost::keyvalue)?;
    Ok(linker)
}
