//! How long compiling a module takes with each of wasmtime's compilers (no
//! compiled-code cache): the hot-reload latency of a changed `.wasm` is
//! mostly this. Usage: `compile_time FILE.wasm [ROUNDS]`.

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let file = args
        .next()
        .ok_or("usage: compile_time FILE.wasm [ROUNDS]")?;
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(5);
    let bytes = std::fs::read(&file)?;
    for (name, strategy) in [
        ("cranelift", wasmtime::Strategy::Cranelift),
        ("winch", wasmtime::Strategy::Winch),
    ] {
        let mut config = wasmtime::Config::new();
        config.strategy(strategy).epoch_interruption(true);
        let engine = wasmtime::Engine::new(&config)?;
        let mut times = Vec::new();
        for _ in 0..rounds {
            let started = Instant::now();
            wasmtime::Module::from_binary(&engine, &bytes)?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{name:<10} median {:6.1} ms  (runs: {times:.1?})",
            times[times.len() / 2]
        );
    }
    Ok(())
}
