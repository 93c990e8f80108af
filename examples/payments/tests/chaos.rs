//! `make chaos`: the claim protocol under kills, stalls and store faults, checked end to end.
//!
//! For each store (SQLite, PostgreSQL, Redis, DynamoDB Local, tiered Redis-in-front-of-
//! PostgreSQL), for `CHAOS_SECS` seconds, the driver keeps several worker processes busy, each
//! one invocation of the reference payments consumer (this binary, re-run with
//! `--chaos-worker`, see `chaos/worker.rs`) on a batch drawn from a small pool of unconfirmed
//! messages, so batches overlap, plus now and then a message already confirmed (a lost
//! deletion) and orders the producer sent twice. Meanwhile it
//! - SIGKILLs nearly a third of the invocations at a random moment (before, during or after their
//!   claims, handler calls and completions);
//! - SIGSTOPs some and resumes them after their deadline, when their lease has lapsed and
//!   another worker may have taken the message over (the fencing case);
//! - injects store faults through the fault proxy of `sqs_claim_testkit::fault` in front
//!   of each server (stall, go dark, drop the answers, reset the connections), or for SQLite
//!   holds the write lock from another connection.
//!
//! Then it settles: faults off, every lease lapsed, every unconfirmed message redelivered
//! until each is confirmed (processed or duplicate). And it checks:
//! - every credit exactly once: half the orders credit an account of their own, whose balance
//!   must be exactly the order's amount (twice means a double credit, zero a lost one); the
//!   other half share a few accounts, whose balances must be the sums;
//! - nothing lost: every message confirmed after settling;
//! - every answer before its deadline (workers we froze past it excepted; a worker silent
//!   for 5 s past its deadline is killed and counted).
//!
//! Then the control: the same run with deduplication off (the key is an attribute that
//! changes on every delivery, so no redelivery is ever recognized; the credit still commits
//! with the completion) must show double credits, proving the checks can fail.
//!
//! Before all that, for each networked store, the dark and slow figures (`chaos/dark.rs`): 60
//! payments on a store that goes silent right after the start-up check, as `payments invoke`
//! (no deadline) and as the `consumer` under a Lambda deadline: every message reported for
//! retry (those not started at once, "store dark"), healed, each credited exactly once; and 60
//! on a store whose every answer comes 1-3 s late (each under the store's bound on one answer):
//! all processed, none reported. The tiered store's dark run darkens both tiers. The time each
//! took is printed beside the bound (one store timeout plus 1 s).
//!
//! Not run by plain `cargo test` (it prints a skip line): `SQS_CLAIM_CHAOS=1` turns it on.
//!
//! | variable | default | meaning |
//! |----------|---------|---------|
//! | `SQS_CLAIM_CHAOS` | unset | `1` to run |
//! | `CHAOS_SECS` | `120` | chaos per store, dedup run |
//! | `CHAOS_CONTROL_SECS` | `CHAOS_SECS / 6`, at least 5 | chaos per store, control run (`0` skips it: for replaying a dedup run only) |
//! | `CHAOS_STORES` | all | comma-separated: `sqlite,postgres,redis,dynamodb,tiered` |
//! | `CHAOS_SEED` | from the clock | replays the schedule (batches, kills, stops, faults) |
//! | `CHAOS_WORKERS` | `4` | invocations at once |
//! | `CHAOS_BUDGET_MS` | `4000` | each invocation's deadline, from its start |
//! | `CHAOS_FAULTS` | `1` | `0`: kills and stops only, no store faults |
//! | `CHAOS_DARK` | `1` | the dark and slow figures first; `0` skips them, `only` runs nothing else |
//!
//! Servers: `SQS_CLAIM_POSTGRES_URL`, `SQS_CLAIM_REDIS_URL`, `AWS_ENDPOINT_URL_DYNAMODB` (and
//! the AWS credentials of `.standins/env`). Every run uses tables and keys of its own and
//! removes them at the end.

use std::process::ExitCode;

// The harness's parts, in `chaos/`.
mod chaos {
    pub(crate) mod dark;
    pub(crate) mod driver;
    pub(crate) mod stores;
    pub(crate) mod worker;
}

// The example app's test support: the `consumer` binary under the fake Runtime API.
mod support;

use chaos::{dark, driver, stores, worker};

use driver::{Config, Mode};
use stores::Kind;

/// Makes this binary a worker process (see `chaos/worker.rs`).
pub const WORKER_FLAG: &str = "--chaos-worker";

fn main() -> ExitCode {
    if std::env::args().any(|a| a == WORKER_FLAG) {
        return worker::main();
    }
    if std::env::var("SQS_CLAIM_CHAOS").as_deref() != Ok("1") {
        println!("chaos: skipped (SQS_CLAIM_CHAOS=1 runs it; see `make chaos`)");
        return ExitCode::SUCCESS;
    }
    match settings() {
        Ok((cfg, control_secs, stores, seed)) => drive(cfg, control_secs, &stores, seed),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn number(name: &str, default: u64) -> Result<u64, String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|_| format!("{name}={v:?} is not a whole number")),
        _ => Ok(default),
    }
}

fn settings() -> Result<(Config, u64, Vec<Kind>, u64), String> {
    let secs = number("CHAOS_SECS", 120)?;
    let control_secs = number("CHAOS_CONTROL_SECS", (secs / 6).max(5))?;
    let workers = usize::try_from(number("CHAOS_WORKERS", 4)?.max(1)).unwrap_or(4);
    let faults = number("CHAOS_FAULTS", 1)? != 0;
    let budget_ms = number("CHAOS_BUDGET_MS", 4000)?;
    if budget_ms < 2000 {
        return Err(format!(
            "CHAOS_BUDGET_MS={budget_ms}: at least 2000 (no message starts in the last {} ms)",
            worker::DEADLINE_MARGIN.as_millis()
        ));
    }
    let stores = match std::env::var("CHAOS_STORES") {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(Kind::parse)
            .collect::<Result<Vec<_>, _>>()?,
        _ => Kind::ALL.to_vec(),
    };
    let clock_seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let seed = number("CHAOS_SEED", clock_seed % 1_000_000_000)?;
    let cfg = Config {
        secs,
        workers,
        faults,
        budget_ms,
    };
    Ok((cfg, control_secs, stores, seed))
}

/// The seed of one store's run: the same for a store whichever others run with it, so
/// `CHAOS_SEED=S CHAOS_STORES=postgres` replays the PostgreSQL part of a full run.
fn store_seed(seed: u64, kind: Kind, mode: Mode) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in kind.name().bytes().chain([mode as u8]) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn drive(cfg: Config, control_secs: u64, stores: &[Kind], seed: u64) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let names: Vec<&str> = stores.iter().map(|k| k.name()).collect();
    println!(
        "chaos: seed {seed}, stores {}, {} s per store + {control_secs} s control, {} workers, \
         store faults {}",
        names.join(","),
        cfg.secs,
        cfg.workers,
        if cfg.faults { "on" } else { "off" }
    );
    let mut failed = Vec::new();
    let mut runs = 0usize;
    let dark_mode = std::env::var("CHAOS_DARK").unwrap_or_default();
    if dark_mode.trim() != "0" {
        for &kind in stores {
            if kind == Kind::Sqlite {
                println!("chaos dark/slow sqlite: skipped (embedded: no network to go dark)");
                continue;
            }
            runs += 1;
            let figures = runtime.block_on(dark::run(kind));
            for line in &figures.lines {
                println!("{line}");
            }
            if figures.violations.is_empty() {
                println!("  ok");
            } else {
                for v in &figures.violations {
                    println!("  VIOLATION: {v}");
                }
                failed.push(format!("{} [dark/slow]", kind.name()));
            }
        }
    }
    let chaos_stores = if dark_mode.trim() == "only" {
        &[][..]
    } else {
        stores
    };
    for &kind in chaos_stores {
        for (mode, secs) in [(Mode::Dedup, cfg.secs), (Mode::Control, control_secs)] {
            if mode == Mode::Control && secs == 0 {
                println!(
                    "chaos {} [control]: skipped (CHAOS_CONTROL_SECS=0)",
                    kind.name()
                );
                continue;
            }
            let run_cfg = Config {
                secs,
                ..cfg.clone()
            };
            runs += 1;
            let result = runtime.block_on(driver::run(
                kind,
                mode,
                store_seed(seed, kind, mode),
                &run_cfg,
            ));
            match result {
                Ok(report) => {
                    println!("{}", report.summary);
                    if report.violations.is_empty() {
                        println!("  ok");
                    } else {
                        for v in &report.violations {
                            println!("  VIOLATION: {v}");
                        }
                        failed.push(format!(
                            "{} [{}]",
                            report.kind.name(),
                            mode_name(report.mode)
                        ));
                    }
                }
                Err(e) => {
                    println!(
                        "chaos {} [{}]: could not run: {e}",
                        kind.name(),
                        mode_name(mode)
                    );
                    failed.push(format!("{} [{}]", kind.name(), mode_name(mode)));
                }
            }
        }
    }
    // The plain closing line CI reads: one check per store and mode.
    let summary = format!(
        "chaos: {} passed, {} failed",
        runs - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        println!("chaos: every invariant held (seed {seed})");
        println!("{summary}");
        ExitCode::SUCCESS
    } else {
        println!(
            "chaos: FAILED: {}\nreplay: CHAOS_SEED={seed} CHAOS_STORES=<store> CHAOS_SECS={} make chaos \
             (the same batches, kills, stops and faults, in the same order; timing still varies)",
            failed.join(", "),
            cfg.secs
        );
        println!("{summary}");
        ExitCode::FAILURE
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Dedup => "dedup",
        Mode::Control => "control",
    }
}
