//! Writes a generated envc project of HOSTS × NODES_PER_HOST nodes, for benchmarks:
//!
//! ```text
//! cargo run --release -p envc-compiler --example gen_env -- HOSTS NODES_PER_HOST OUT_DIR
//! envc graph --format json OUT_DIR/main.env
//! ```

#[path = "../benches/envgen/mod.rs"]
mod envgen;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: gen_env HOSTS NODES_PER_HOST OUT_DIR";
    let [hosts, per_host, out] = args.as_slice() else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let (Ok(hosts), Ok(per_host)) = (hosts.parse::<usize>(), per_host.parse::<usize>()) else {
        eprintln!("{usage}: HOSTS and NODES_PER_HOST are numbers");
        return ExitCode::from(2);
    };
    if hosts == 0 || per_host == 0 {
        eprintln!("{usage}: HOSTS and NODES_PER_HOST are at least 1");
        return ExitCode::from(2);
    }
    let dir = std::path::Path::new(out);
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("error: cannot create {}: {e}", dir.display());
        return ExitCode::from(1);
    }
    for (name, text) in envgen::project(hosts, per_host) {
        let p = dir.join(name);
        if let Err(e) = std::fs::write(&p, text) {
            eprintln!("error: cannot write {}: {e}", p.display());
            return ExitCode::from(1);
        }
    }
    eprintln!(
        "wrote {}: {hosts} hosts x {per_host} nodes = {} nodes",
        dir.join("main.env").display(),
        hosts * per_host
    );
    ExitCode::SUCCESS
}
