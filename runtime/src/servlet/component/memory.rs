//! A component's `max_memory`, counted over all of its memories together.
//!
//! A component is several core modules, and each may have a memory of its
//! own (up to `host::MAX_MEMORIES`). wasmtime's [`StoreLimits`] holds each
//! memory to its `memory_size` separately, so a component of five modules
//! could grow five memories to the cap each. [`ComponentLimits`] keeps the
//! sum of their sizes and refuses (as a trap, like a single memory past
//! the cap) a growth that would take it past `max_memory`; everything else
//! is left to [`StoreLimits`].

use wasmtime::{ResourceLimiter, StoreLimits};

pub(crate) struct ComponentLimits {
    each: StoreLimits,
    /// `max_memory`, in bytes.
    max_total: usize,
    /// Bytes of every memory of the instance together.
    total: usize,
    /// The growth last allowed, taken back if the memory then failed to
    /// grow.
    last_growth: usize,
}

impl ComponentLimits {
    pub(crate) fn new(each: StoreLimits, max_total: usize) -> ComponentLimits {
        ComponentLimits {
            each,
            max_total,
            total: 0,
            last_growth: 0,
        }
    }
}

impl ResourceLimiter for ComponentLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Only the growth asked now can fail next.
        self.last_growth = 0;
        let growth = desired.saturating_sub(current);
        let total = self.total.saturating_add(growth);
        if total > self.max_total {
            wasmtime::bail!(
                "forcing trap when growing memory to {desired} bytes: the component's memories would hold {total} bytes together, past max_memory ({} bytes)",
                self.max_total
            );
        }
        let allowed = self.each.memory_growing(current, desired, maximum)?;
        if allowed {
            self.total = total;
            self.last_growth = growth;
        }
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.total = self
            .total
            .saturating_sub(std::mem::take(&mut self.last_growth));
        self.each.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.each.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.each.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.each.instances()
    }

    fn tables(&self) -> usize {
        self.each.tables()
    }

    fn memories(&self) -> usize {
        self.each.memories()
    }
}

#[cfg(test)]
mod tests {
    use super::ComponentLimits;
    use wasmtime::{ResourceLimiter, StoreLimitsBuilder};

    #[test]
    fn memories_are_held_to_the_cap_together() {
        let mib = 1 << 20;
        let each = StoreLimitsBuilder::new()
            .memory_size(64 * mib)
            .trap_on_grow_failure(true)
            .build();
        let mut limits = ComponentLimits::new(each, 64 * mib);
        // Two memories made at instantiation, then grown.
        assert!(limits.memory_growing(0, mib, None).expect("first"));
        assert!(limits.memory_growing(0, 2 * mib, None).expect("second"));
        assert!(limits.memory_growing(mib, 40 * mib, None).expect("grow"));
        // 40 + 2 MiB held: the second may reach 24 MiB, not 25.
        assert!(
            limits
                .memory_growing(2 * mib, 24 * mib, None)
                .expect("fits")
        );
        // That growth failed after all: it is not counted.
        assert!(
            limits
                .memory_grow_failed(wasmtime::format_err!("no"))
                .is_err()
        );
        assert!(
            limits
                .memory_growing(2 * mib, 24 * mib, None)
                .expect("fits again")
        );
        let refused = limits.memory_growing(24 * mib, 25 * mib, None);
        assert!(refused.is_err(), "past the cap together");
    }
}
