//! The model tied to the code: random operation sequences against the protocol model's store (`model/`) and the
//! library's `MemoryStore` and `SqliteStore`, compared answer by answer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqs_claim::ErrorKind;
use sqs_claim::store::sqlite::SqliteStore;
use sqs_claim::store::{
    Claim, ClaimRequest, ClaimStore, ClaimToken, Completion, Effects, MemoryStore, OneShotWrite,
};
use sqs_claim_model::Mutant;
use sqs_claim_model::store::{
    ClaimAnswer, ExpiryUnit, Fenced, Millis, OneShotAnswer, Request, Store, Token,
};

const KEYS: u8 = 2;
const SEQUENCES: u64 = 300;
const STEPS: usize = 40;

fn at(t: Millis) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_000_000) + Duration::from_millis(u64::try_from(t).unwrap())
}

fn key(k: u8) -> String {
    format!("model-key-{k}")
}

#[tokio::test]
async fn the_memory_store_answers_as_the_model() {
    for seed in 0..SEQUENCES {
        compare(seed, &MemoryStore::new()).await;
    }
    println!(
        "memory: {SEQUENCES} sequences of {STEPS} operations on {KEYS} keys, the same answers"
    );
}

#[tokio::test]
async fn the_sqlite_store_answers_as_the_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    for seed in 0..SEQUENCES {
        let path = dir.path().join(format!("claims-{seed}.db"));
        let real = SqliteStore::open(&path).expect("open SQLite");
        compare(seed, &real).await;
    }
    println!(
        "sqlite: {SEQUENCES} sequences of {STEPS} operations on {KEYS} keys, the same answers"
    );
}

async fn compare<S: ClaimStore>(seed: u64, real: &S) {
    {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut model = Store::new(usize::from(KEYS), ExpiryUnit::Millis);
        let mut tokens: Vec<(Token, ClaimToken)> = Vec::new();
        let mut now: Millis = 0;
        for step in 0..STEPS {
            now += rng.i32(0..=3) * 250;
            let k = rng.u8(0..KEYS);
            let lease_until = now + rng.i32(1..=4) * 250;
            let expires_at = now + rng.i32(0..=6) * 250;
            let req = Request {
                key: k,
                now,
                lease_until,
                expires_at,
            };
            let name = key(k);
            let real_req = ClaimRequest {
                key: &name,
                now: at(now),
                lease_until: at(lease_until),
                expires_at: at(expires_at),
                fingerprint: None,
            };
            let context = format!("seed {seed} step {step}: {req:?}");
            match rng.u8(0..4) {
                0 => {
                    let (want, _) = model.claim(req, Mutant::None);
                    let got = real.claim(real_req).await.expect("claim");
                    match (want, got) {
                        (ClaimAnswer::Acquired(t), Claim::Acquired(real_token)) => {
                            tokens.push((t, real_token));
                        }
                        (ClaimAnswer::Completed { expires_at }, Claim::Completed(record)) => {
                            assert_eq!(at(expires_at), record.expires_at, "{context}");
                        }
                        (
                            ClaimAnswer::HeldElsewhere { lease_until },
                            Claim::HeldElsewhere {
                                lease_until: real_lease,
                            },
                        ) => assert_eq!(lease_until.map(at), real_lease, "{context}"),
                        (want, got) => panic!("{context}: model {want:?}, store {got:?}"),
                    }
                }
                1 | 2 if !tokens.is_empty() => {
                    let (t, real_token) = tokens[rng.usize(..tokens.len())].clone();
                    let (want, got) = if rng.bool() {
                        let (want, _) = model.complete(k, t, expires_at, Mutant::None);
                        let completion = Completion::new(at(expires_at));
                        (
                            want,
                            real.complete_with(&name, &real_token, completion).await,
                        )
                    } else {
                        let (want, _) = model.release(k, t, Mutant::None);
                        (want, real.release(&name, &real_token).await)
                    };
                    match (want, got) {
                        (Fenced::Ok, Ok(())) => {}
                        (Fenced::LostClaim, Err(e)) if e.kind() == ErrorKind::LostClaim => {}
                        (want, got) => panic!("{context}: model {want:?}, store {got:?}"),
                    }
                }
                _ => {
                    let (want, _) = model.claim_completed(req, Mutant::None);
                    let got = real
                        .claim_completed(real_req, Effects::none())
                        .await
                        .expect("one-shot");
                    match (want, got) {
                        (OneShotAnswer::Committed, OneShotWrite::Committed) => {}
                        (OneShotAnswer::Completed { expires_at }, OneShotWrite::Completed(r)) => {
                            assert_eq!(at(expires_at), r.expires_at, "{context}");
                        }
                        (
                            OneShotAnswer::HeldElsewhere { lease_until },
                            OneShotWrite::HeldElsewhere {
                                lease_until: real_lease,
                            },
                        ) => assert_eq!(lease_until.map(at), real_lease, "{context}"),
                        (want, got) => panic!("{context}: model {want:?}, store {got:?}"),
                    }
                }
            }
        }
    }
}
