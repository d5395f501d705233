//! `wasi:keyvalue@0.2.0-draft` (store, atomics, batch) for components,
//! backed by swan's stores: `open(name)` opens a store the route lists in
//! `stores`. The draft is the one wasmtime 48 ships and the component
//! toolchains bind against; it has no TTL, compare-and-swap or prefix
//! listing, so `swan:keyvalue/extras@0.1.0` adds them on the same buckets
//! (native servlets have the same operations in ABI v1).

use std::sync::Arc;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};

use crate::store::{Store, StoreAccess, StoreError};

mod generated {
    wasmtime::component::bindgen!({
        path: "wit/keyvalue",
        world: "swan:keyvalue-host/host",
        imports: { default: async | trappable },
        with: {
            "wasi:keyvalue/store.bucket": super::Bucket,
        },
        trappable_error_type: {
            "wasi:keyvalue/store.error" => crate::store::StoreError,
        },
    });
}

use generated::swan::keyvalue::extras;
use generated::wasi::keyvalue::{atomics, batch, store};

/// An open store, as the guest holds it.
#[expect(
    unreachable_pub,
    reason = "the generated bindings name it from outside this module"
)]
pub struct Bucket {
    store: Arc<Store>,
}

/// The view the generated host traits are implemented on.
pub(crate) struct KeyValue<'a> {
    pub(crate) access: &'a mut StoreAccess,
    pub(crate) table: &'a mut ResourceTable,
}

struct HasKeyValue;

impl HasData for HasKeyValue {
    type Data<'a> = KeyValue<'a>;
}

/// Adds the three interfaces to a component linker.
pub(crate) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> KeyValue<'_>,
) -> wasmtime::Result<()> {
    store::add_to_linker::<_, HasKeyValue>(linker, view)?;
    atomics::add_to_linker::<_, HasKeyValue>(linker, view)?;
    batch::add_to_linker::<_, HasKeyValue>(linker, view)?;
    extras::add_to_linker::<_, HasKeyValue>(linker, view)?;
    Ok(())
}

impl KeyValue<'_> {
    /// A batch's keys (and values), counted and checked against the
    /// store's limits before any of it runs: past a limit nothing of it is
    /// done.
    fn admit<'a>(
        &mut self,
        store: &Store,
        mut entries: impl ExactSizeIterator<Item = (&'a str, Option<&'a [u8]>)>,
    ) -> Result<(), StoreError> {
        self.access.count_many(store, entries.len())?;
        entries.try_for_each(|(key, value)| store.check_sizes(key, value))
    }

    /// The bucket's store, its call counted as one operation.
    fn bucket(&mut self, bucket: &Resource<Bucket>) -> Result<Arc<Store>, StoreError> {
        let store = self.store_of(bucket)?;
        self.access.count(&store)?;
        Ok(store)
    }

    /// The bucket's store, uncounted: a batch counts one per key
    /// (`admit`).
    fn store_of(&self, bucket: &Resource<Bucket>) -> Result<Arc<Store>, StoreError> {
        self.table
            .get(bucket)
            .map(|b| b.store.clone())
            .map_err(|e| StoreError::Other(e.to_string()))
    }
}

impl store::Host for KeyValue<'_> {
    async fn open(&mut self, identifier: String) -> Result<Resource<Bucket>, StoreError> {
        let store = self.access.open(&identifier)?;
        self.table
            .push(Bucket { store })
            .map_err(|e| StoreError::Other(e.to_string()))
    }

    fn convert_error(&mut self, err: StoreError) -> wasmtime::Result<store::Error> {
        Ok(match err {
            StoreError::NoSuchStore => store::Error::NoSuchStore,
            StoreError::AccessDenied => store::Error::AccessDenied,
            other => store::Error::Other(other.to_string()),
        })
    }
}

impl store::HostBucket for KeyValue<'_> {
    async fn get(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let store = self.bucket(&bucket)?;
        let r = store.get(&key).await.map(|v| v.map(|b| b.to_vec()));
        self.access.note(r)
    }

    async fn set(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        let store = self.bucket(&bucket)?;
        let r = store.set(&key, value.into(), None).await;
        self.access.note(r)
    }

    async fn delete(&mut self, bucket: Resource<Bucket>, key: String) -> Result<(), StoreError> {
        let store = self.bucket(&bucket)?;
        let r = store.delete(&key).await.map(|_| ());
        self.access.note(r)
    }

    async fn exists(&mut self, bucket: Resource<Bucket>, key: String) -> Result<bool, StoreError> {
        let store = self.bucket(&bucket)?;
        let r = store.exists(&key).await;
        self.access.note(r)
    }

    async fn list_keys(
        &mut self,
        bucket: Resource<Bucket>,
        cursor: Option<u64>,
    ) -> Result<store::KeyResponse, StoreError> {
        let store = self.bucket(&bucket)?;
        let limit = store.limits().max_list_keys;
        let r = store
            .list("", cursor, limit)
            .await
            .map(|page| store::KeyResponse {
                keys: page.keys,
                cursor: page.cursor,
            });
        self.access.note(r)
    }

    async fn drop(&mut self, bucket: Resource<Bucket>) -> wasmtime::Result<()> {
        self.table.delete(bucket)?;
        Ok(())
    }
}

impl atomics::Host for KeyValue<'_> {
    async fn increment(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        delta: u64,
    ) -> Result<u64, StoreError> {
        let store = self.bucket(&bucket)?;
        // wasi:keyvalue's counters are unsigned: a negative number stored
        // (by a native servlet, or set as text) is refused, not incremented.
        let r = store.increment_unsigned(&key, delta).await;
        self.access.note(r)
    }
}

impl batch::Host for KeyValue<'_> {
    async fn get_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> Result<Vec<Option<(String, Vec<u8>)>>, StoreError> {
        let store = self.store_of(&bucket)?;
        self.admit(&store, keys.iter().map(|k| (k.as_str(), None)))?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let r = store.get(&key).await;
            let value = self.access.note(r)?;
            out.push(value.map(|v| (key, v.to_vec())));
        }
        Ok(out)
    }

    async fn set_many(
        &mut self,
        bucket: Resource<Bucket>,
        key_values: Vec<(String, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        let store = self.store_of(&bucket)?;
        let entries = key_values
            .iter()
            .map(|(k, v)| (k.as_str(), Some(v.as_slice())));
        self.admit(&store, entries)?;
        for (key, value) in key_values {
            let r = store.set(&key, value.into(), None).await;
            self.access.note(r)?;
        }
        Ok(())
    }

    async fn delete_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> Result<(), StoreError> {
        let store = self.store_of(&bucket)?;
        self.admit(&store, keys.iter().map(|k| (k.as_str(), None)))?;
        for key in keys {
            let r = store.delete(&key).await.map(|_| ());
            self.access.note(r)?;
        }
        Ok(())
    }
}

impl extras::Host for KeyValue<'_> {
    async fn set_with_ttl(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        value: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<(), StoreError> {
        let store = self.bucket(&bucket)?;
        let ttl = (ttl_ms > 0).then(|| std::time::Duration::from_millis(ttl_ms));
        let r = store.set(&key, value.into(), ttl).await;
        self.access.note(r)
    }

    async fn compare_and_swap(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let store = self.bucket(&bucket)?;
        let r = store
            .compare_and_swap(&key, expected.map(Into::into), new.into())
            .await;
        self.access.note(r)
    }

    async fn list_prefix(
        &mut self,
        bucket: Resource<Bucket>,
        prefix: String,
        cursor: Option<u64>,
    ) -> Result<store::KeyResponse, StoreError> {
        let store = self.bucket(&bucket)?;
        let limit = store.limits().max_list_keys;
        let r = store
            .list(&prefix, cursor, limit)
            .await
            .map(|page| store::KeyResponse {
                keys: page.keys,
                cursor: page.cursor,
            });
        self.access.note(r)
    }
}
