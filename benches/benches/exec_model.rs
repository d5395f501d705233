//! How a servlet call should meet the tokio reactor: on an async fiber in
//! the worker's own runtime (what swan does), or handed to a bounded
//! blocking pool as a synchronous call. Same engine settings, same minimal
//! module, one request = instantiate + call + drop.
#![expect(missing_docs, reason = "criterion macros generate undocumented items")]

use criterion::{Criterion, criterion_group, criterion_main};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, Linker, Module, PoolingAllocationConfig, Store,
};

const WAT: &str = r#"(module
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello")
  (func (export "swan_handle") (result i32) (drop (call $write (i32.const 16) (i32.const 5))) i32.const 0))"#;

fn engine() -> Engine {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(100)
        .total_memories(100)
        .total_tables(100)
        .total_stacks(100)
        .linear_memory_keep_resident(2 << 20)
        .async_stack_keep_resident(128 << 10);
    let mut config = Config::new();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config).expect("engine")
}

fn bench(c: &mut Criterion) {
    let engine = engine();
    let module = Module::new(&engine, WAT).expect("module");
    let mut linker: Linker<Vec<u8>> = Linker::new(&engine);
    linker
        .func_wrap(
            "swan",
            "response_write",
            |mut caller: wasmtime::Caller<'_, Vec<u8>>, ptr: i32, len: i32| {
                let mem = caller
                    .get_export("memory")
                    .and_then(|e| e.into_memory())
                    .expect("memory");
                let (data, out) = mem.data_and_store_mut(&mut caller);
                out.extend_from_slice(&data[ptr as usize..(ptr + len) as usize]);
                0
            },
        )
        .expect("link");
    let pre = linker.instantiate_pre(&module).expect("pre");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(4)
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("exec_model");
    group.bench_function("async fiber on the worker runtime", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut store = Store::new(&engine, Vec::new());
                let instance = pre.instantiate_async(&mut store).await.expect("instance");
                let f = instance
                    .get_typed_func::<(), i32>(&mut store, "swan_handle")
                    .expect("func");
                f.call_async(&mut store, ()).await.expect("call");
                store.into_data()
            })
        })
    });
    group.bench_function("sync call on a blocking pool", |b| {
        b.iter(|| {
            rt.block_on(async {
                let (engine, pre) = (engine.clone(), pre.clone());
                tokio::task::spawn_blocking(move || {
                    let mut store = Store::new(&engine, Vec::new());
                    let instance = pre.instantiate(&mut store).expect("instance");
                    let f = instance
                        .get_typed_func::<(), i32>(&mut store, "swan_handle")
                        .expect("func");
                    f.call(&mut store, ()).expect("call");
                    store.into_data()
                })
                .await
                .expect("join")
            })
        })
    });
    group.bench_function(
        "sync call inline (no isolation from the reactor, reference)",
        |b| {
            b.iter(|| {
                let mut store = Store::new(&engine, Vec::new());
                let instance = pre.instantiate(&mut store).expect("instance");
                let f = instance
                    .get_typed_func::<(), i32>(&mut store, "swan_handle")
                    .expect("func");
                f.call(&mut store, ()).expect("call");
                store.into_data()
            })
        },
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
