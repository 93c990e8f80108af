//! The model tied to the code: random operation sequences against the protocol model's store
//! (`model/src/store.rs`, the store the exhaustive check explores) and against every real
//! store (memory, SQLite, Redis, PostgreSQL, tiered Redis in front of PostgreSQL, DynamoDB
//! Local behind the conflict model), compared answer by answer, so the model cannot drift from
//! what the stores do.
//!
//! A step is one operation of the contract (claim, extend, complete, release, one-shot, packed
//! one-shot), or two of them sent at once. A lone operation must answer exactly as the model
//! does. Two at once must answer as the model does for one of their two serial orders (the
//! contract's atomicity), where an operation the store cancelled for contention
//! (`ErrorKind::Contention`: DynamoDB's `TransactionConflict`, put back in front of DynamoDB
//! Local by `ConflictProxy`) changed nothing; the model then follows the order that matched.
//!
//! A packed one-shot is all or nothing on a store that packs (`max_pack_actions`: DynamoDB);
//! elsewhere it is each write alone, and the model is asked the same way.
//!
//! Times are the model's milliseconds from a base on a whole second, an hour ahead of the real
//! clock (so no server-side TTL ever reaps a record the model still counts). DynamoDB keeps
//! expiries in whole seconds, rounded up: the model does the same for it (`ExpiryUnit::Seconds`).

use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqs_claim::SqliteStore;
use sqs_claim::store::{
    CachedStore, Claim, ClaimRequest, ClaimStore, ClaimToken, Completion, Effects, Extension,
    MemoryStore, OneShotWrite, Packed,
};
use sqs_claim::{Error, ErrorKind, TieredStore};
use sqs_claim_model::Mutant;
use sqs_claim_model::store::{
    ClaimAnswer, ExpiryUnit, Fenced, Millis, OneShotAnswer, PackedAnswer, Request, Store, Token,
};
use sqs_claim_testkit::conflict::ConflictProxy;
use sqs_claim_testkit::local;

use support::servers;

/// Keys per sequence: enough for a pack of two and a third key beside it.
const KEYS: u8 = 3;
/// Operations per sequence.
const STEPS: usize = 40;
/// Sequences on an in-process store.
const LOCAL_SEQUENCES: u64 = 300;
/// Sequences on a store behind a network (each a fresh set of keys on one table or prefix).
const SERVER_SEQUENCES: u64 = 100;

/// The tokens handed out in a sequence: the model's, paired with the store's.
type Tokens = Vec<(Token, ClaimToken)>;

/// One operation of the contract, in the model's terms.
#[derive(Debug, Clone)]
enum Op {
    Claim(Request),
    /// Complete `key` with the `token`-th token handed out in this sequence.
    Complete {
        key: u8,
        token: usize,
        expires_at: Millis,
    },
    Release {
        key: u8,
        token: usize,
    },
    /// Extend `token`'s claim on `key` (the `token`-th token handed out in this sequence).
    Extend {
        key: u8,
        token: usize,
        now: Millis,
        lease_until: Millis,
        expires_at: Millis,
    },
    OneShot(Request),
    /// A packed one-shot of writes on distinct keys.
    Packed(Vec<Request>),
}

/// How a store does what the contract leaves to it.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// A packed one-shot is one atomic request (`max_pack_actions`); otherwise each write goes
    /// alone, all at once.
    packs: bool,
    /// A one-shot is one atomic step (`atomic_one_shot`); otherwise it is the contract's
    /// default, a claim and then a completion, which another writer can see between.
    atomic_one_shot: bool,
    /// The store extends leases (`extends_leases`): extensions are among the operations.
    extends_leases: bool,
}

/// One write's answer to a one-shot (alone or in a pack).
#[derive(Debug, Clone, Copy)]
enum Write {
    Answered(OneShotAnswer),
    Unsent,
    /// A two-step one-shot whose completion was refused (`LostClaim`).
    Lost,
}

/// The model's answer to an operation.
#[derive(Debug, Clone)]
enum Want {
    Claim(ClaimAnswer),
    Fenced(Fenced),
    OneShot(Write),
    Packed(Vec<Write>),
    /// Cancelled for contention: nothing applied.
    Cancelled,
}

/// What the model runs for a write of an operation: its atomic steps one at a time, so that a
/// write of another operation can come between two of them.
#[derive(Debug, Clone)]
enum Thread {
    Claim(Request),
    Complete {
        key: u8,
        token: Token,
        expires_at: Millis,
    },
    Release {
        key: u8,
        token: Token,
    },
    Extend {
        key: u8,
        token: Token,
        now: Millis,
        lease_until: Millis,
        expires_at: Millis,
    },
    OneShot(Request),
    /// A one-shot in two steps: the claim ...
    TwoStep(Request),
    /// ... then, once acquired, the completion.
    Completing(Request, Token),
    Pack(Vec<Request>),
}

/// A thread's result.
#[derive(Debug, Clone)]
enum Part {
    Claim(ClaimAnswer),
    Fenced(Fenced),
    Write(Write),
    Pack(Vec<Write>),
}

fn threads(op: &Op, tokens: &[(Token, ClaimToken)], shape: Shape) -> Vec<Thread> {
    let one_shot = |r: &Request| {
        if shape.atomic_one_shot {
            Thread::OneShot(*r)
        } else {
            Thread::TwoStep(*r)
        }
    };
    match op {
        Op::Claim(r) => vec![Thread::Claim(*r)],
        Op::Complete {
            key,
            token,
            expires_at,
        } => vec![Thread::Complete {
            key: *key,
            token: tokens[*token].0,
            expires_at: *expires_at,
        }],
        Op::Release { key, token } => vec![Thread::Release {
            key: *key,
            token: tokens[*token].0,
        }],
        Op::Extend {
            key,
            token,
            now,
            lease_until,
            expires_at,
        } => vec![Thread::Extend {
            key: *key,
            token: tokens[*token].0,
            now: *now,
            lease_until: *lease_until,
            expires_at: *expires_at,
        }],
        Op::OneShot(r) => vec![one_shot(r)],
        Op::Packed(reqs) if shape.packs => vec![Thread::Pack(reqs.clone())],
        // A store that does not pack sends each write alone, all at once.
        Op::Packed(reqs) => reqs.iter().map(one_shot).collect(),
    }
}

/// Runs one atomic step of `thread` on `model`: its result, or the thread left to run.
fn step(thread: Thread, model: &mut Store) -> Result<Part, Thread> {
    let m = Mutant::None;
    let answered = |a| Part::Write(Write::Answered(a));
    Ok(match thread {
        Thread::Claim(r) => Part::Claim(model.claim(r, m).0),
        Thread::Complete {
            key,
            token,
            expires_at,
        } => Part::Fenced(model.complete(key, token, expires_at, m).0),
        Thread::Release { key, token } => Part::Fenced(model.release(key, token, m).0),
        Thread::Extend {
            key,
            token,
            now,
            lease_until,
            expires_at,
        } => Part::Fenced(model.extend(key, token, now, lease_until, expires_at, m).0),
        Thread::OneShot(r) => answered(model.claim_completed(r, m).0),
        Thread::TwoStep(r) => match model.claim(r, m).0 {
            ClaimAnswer::Acquired(token) => return Err(Thread::Completing(r, token)),
            ClaimAnswer::Completed { expires_at } => {
                answered(OneShotAnswer::Completed { expires_at })
            }
            ClaimAnswer::HeldElsewhere { lease_until } => {
                answered(OneShotAnswer::HeldElsewhere { lease_until })
            }
        },
        Thread::Completing(r, token) => match model.complete(r.key, token, r.expires_at, m).0 {
            Fenced::Ok => answered(OneShotAnswer::Committed),
            Fenced::LostClaim => Part::Write(Write::Lost),
        },
        Thread::Pack(reqs) => Part::Pack(
            model
                .claim_completed_packed(&reqs, m)
                .0
                .into_iter()
                .map(|a| match a {
                    PackedAnswer::Answered(a) => Write::Answered(a),
                    PackedAnswer::Unsent => Write::Unsent,
                })
                .collect(),
        ),
    })
}

/// An operation's answer from its threads' results.
fn assemble(op: &Op, parts: Vec<Part>) -> Want {
    match (op, &parts[..]) {
        (Op::Claim(_), [Part::Claim(a)]) => Want::Claim(*a),
        (Op::Complete { .. } | Op::Release { .. } | Op::Extend { .. }, [Part::Fenced(a)]) => {
            Want::Fenced(*a)
        }
        (Op::OneShot(_), [Part::Write(w)]) => Want::OneShot(*w),
        (Op::Packed(_), [Part::Pack(writes)]) => Want::Packed(writes.clone()),
        (Op::Packed(_), parts) => Want::Packed(
            parts
                .iter()
                .map(|p| match p {
                    Part::Write(w) => *w,
                    other => unreachable!("a pack's write answered {other:?}"),
                })
                .collect(),
        ),
        (op, parts) => unreachable!("{op:?} answered {parts:?}"),
    }
}

/// Every end state of the model, with each operation's answer, over every interleaving of
/// the operations' atomic steps (an operation the store cancelled for contention runs none).
fn interleavings(
    model: &Store,
    ops: &[Op],
    cancelled: &[bool],
    tokens: &[(Token, ClaimToken)],
    shape: Shape,
) -> Vec<(Store, Vec<Want>)> {
    type Pending = Vec<Vec<Option<Thread>>>;
    type Parts = Vec<Vec<Option<Part>>>;
    fn explore(
        model: Store,
        pending: Pending,
        parts: Parts,
        ops: &[Op],
        cancelled: &[bool],
        out: &mut Vec<(Store, Vec<Want>)>,
    ) {
        let mut any = false;
        for (i, threads) in pending.iter().enumerate() {
            for (j, thread) in threads.iter().enumerate() {
                let Some(thread) = thread else { continue };
                any = true;
                let (mut model, mut pending, mut parts) =
                    (model.clone(), pending.clone(), parts.clone());
                match step(thread.clone(), &mut model) {
                    Ok(part) => {
                        pending[i][j] = None;
                        parts[i][j] = Some(part);
                    }
                    Err(next) => pending[i][j] = Some(next),
                }
                explore(model, pending, parts, ops, cancelled, out);
            }
        }
        if !any {
            let wants = ops
                .iter()
                .zip(parts)
                .zip(cancelled)
                .map(|((op, parts), &cancelled)| {
                    if cancelled {
                        Want::Cancelled
                    } else {
                        assemble(op, parts.into_iter().map(Option::unwrap).collect())
                    }
                })
                .collect();
            out.push((model, wants));
        }
    }
    let pending: Pending = ops
        .iter()
        .zip(cancelled)
        .map(|(op, &cancelled)| {
            if cancelled {
                Vec::new()
            } else {
                threads(op, tokens, shape).into_iter().map(Some).collect()
            }
        })
        .collect();
    let parts: Parts = pending.iter().map(|t| vec![None; t.len()]).collect();
    let mut out = Vec::new();
    explore(model.clone(), pending, parts, ops, cancelled, &mut out);
    out
}

/// A real store's answer.
#[derive(Debug)]
enum Got {
    Claim(Result<Claim, Error>),
    Fenced(Result<(), Error>),
    OneShot(Result<OneShotWrite, Error>),
    Packed(Vec<Packed>),
}

impl Got {
    /// The store cancelled the operation for contention (for a pack: one of its writes was,
    /// so none was written).
    fn contended(&self) -> bool {
        let contention = |e: &Error| e.kind() == ErrorKind::Contention;
        match self {
            Got::Claim(Err(e)) | Got::Fenced(Err(e)) | Got::OneShot(Err(e)) => contention(e),
            Got::Packed(answers) => answers
                .iter()
                .any(|a| matches!(a, Packed::Answered(Err(e)) if contention(e))),
            _ => false,
        }
    }
}

/// A sequence's clock and names: model milliseconds to real times and keys.
struct Names {
    base: SystemTime,
    seed: u64,
}

impl Names {
    fn new(seed: u64) -> Self {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs();
        Names {
            base: UNIX_EPOCH + Duration::from_secs(secs + 3600),
            seed,
        }
    }

    fn at(&self, t: Millis) -> SystemTime {
        self.base + Duration::from_millis(u64::try_from(t).expect("model times are positive"))
    }

    fn key(&self, k: u8) -> String {
        format!("model-{}-{k}", self.seed)
    }
}

/// Sends `op` to the real store.
async fn ask_store<S: ClaimStore>(
    store: &S,
    names: &Names,
    op: &Op,
    tokens: &[(Token, ClaimToken)],
) -> Got {
    let keys: Vec<String> = (0..KEYS).map(|k| names.key(k)).collect();
    let request = |r: &Request| ClaimRequest {
        key: &keys[usize::from(r.key)],
        now: names.at(r.now),
        lease_until: names.at(r.lease_until),
        expires_at: names.at(r.expires_at),
        fingerprint: None,
    };
    match op {
        Op::Claim(r) => Got::Claim(store.claim(request(r)).await),
        Op::Complete {
            key,
            token,
            expires_at,
        } => Got::Fenced(
            store
                .complete_with(
                    &keys[usize::from(*key)],
                    &tokens[*token].1,
                    Completion::new(names.at(*expires_at)),
                )
                .await,
        ),
        Op::Release { key, token } => Got::Fenced(
            store
                .release(&keys[usize::from(*key)], &tokens[*token].1)
                .await,
        ),
        Op::Extend {
            key,
            token,
            now,
            lease_until,
            expires_at,
        } => Got::Fenced(
            store
                .extend(Extension::new(
                    &keys[usize::from(*key)],
                    &tokens[*token].1,
                    names.at(*now),
                    names.at(*lease_until),
                    names.at(*expires_at),
                ))
                .await,
        ),
        Op::OneShot(r) => Got::OneShot(store.claim_completed(request(r), Effects::none()).await),
        Op::Packed(reqs) => Got::Packed(
            store
                .claim_completed_packed(reqs.iter().map(|r| (request(r), Vec::new())).collect())
                .await,
        ),
    }
}

/// Whether the store's answer is the model's; the token a claim acquired, paired with the
/// model's.
fn agree(want: &Want, got: &Got, names: &Names) -> Result<Option<(Token, ClaimToken)>, String> {
    let write = |want: &Write, got: &Result<OneShotWrite, Error>| match (want, got) {
        (Write::Answered(OneShotAnswer::Committed), Ok(OneShotWrite::Committed)) => true,
        (
            Write::Answered(OneShotAnswer::Completed { expires_at }),
            Ok(OneShotWrite::Completed { record: r, .. }),
        ) => names.at(*expires_at) == r.expires_at,
        (
            Write::Answered(OneShotAnswer::HeldElsewhere { lease_until }),
            Ok(OneShotWrite::HeldElsewhere {
                lease_until: real_lease,
            }),
        ) => lease_until.map(|t| names.at(t)) == *real_lease,
        (Write::Lost, Err(e)) => e.kind() == ErrorKind::LostClaim,
        _ => false,
    };
    let same = match (want, got) {
        // Cancelled: the contention error, and for a pack nothing else but `Unsent`.
        (Want::Cancelled, Got::Packed(answers)) => {
            got.contended()
                && answers.iter().all(|a| match a {
                    Packed::Unsent => true,
                    Packed::Answered(Err(e)) => e.kind() == ErrorKind::Contention,
                    _ => false,
                })
        }
        (Want::Cancelled, got) => got.contended(),
        (Want::Claim(ClaimAnswer::Acquired(t)), Got::Claim(Ok(Claim::Acquired(real)))) => {
            return Ok(Some((*t, real.clone())));
        }
        (
            Want::Claim(ClaimAnswer::Completed { expires_at }),
            Got::Claim(Ok(Claim::Completed { record: r, .. })),
        ) => names.at(*expires_at) == r.expires_at,
        (
            Want::Claim(ClaimAnswer::HeldElsewhere { lease_until }),
            Got::Claim(Ok(Claim::HeldElsewhere {
                lease_until: real_lease,
            })),
        ) => lease_until.map(|t| names.at(t)) == *real_lease,
        (Want::Fenced(Fenced::Ok), Got::Fenced(Ok(()))) => true,
        (Want::Fenced(Fenced::LostClaim), Got::Fenced(Err(e))) => e.kind() == ErrorKind::LostClaim,
        (Want::OneShot(want), Got::OneShot(got)) => write(want, got),
        (Want::Packed(want), Got::Packed(got)) => {
            want.len() == got.len()
                && want.iter().zip(got).all(|(w, g)| match (w, g) {
                    (Write::Unsent, Packed::Unsent) => true,
                    (w, Packed::Answered(g)) => write(w, g),
                    _ => false,
                })
        }
        _ => false,
    };
    if same {
        Ok(None)
    } else {
        Err(format!("model {want:?}, store {got:?}"))
    }
}

/// The model's end state and the tokens acquired, for the first interleaving of `ops` whose
/// answers are the store's; otherwise every interleaving's disagreement.
fn follow(
    model: &Store,
    ops: &[Op],
    gots: &[Got],
    tokens: &[(Token, ClaimToken)],
    shape: Shape,
    names: &Names,
) -> Result<(Store, Tokens), Vec<String>> {
    let cancelled: Vec<bool> = gots.iter().map(Got::contended).collect();
    let mut failures = Vec::new();
    'candidates: for (end, wants) in interleavings(model, ops, &cancelled, tokens, shape) {
        let mut acquired = Vec::new();
        for (want, got) in wants.iter().zip(gots) {
            match agree(want, got, names) {
                Ok(token) => acquired.extend(token),
                Err(e) => {
                    failures.push(e);
                    continue 'candidates;
                }
            }
        }
        return Ok((end, acquired));
    }
    Err(failures)
}

/// A random operation at `now` (an extension only on a store that extends leases).
fn random_op(
    rng: &mut fastrand::Rng,
    now: Millis,
    tokens: usize,
    packs_allowed: bool,
    extends: bool,
) -> Op {
    let request = |rng: &mut fastrand::Rng, key: u8| Request {
        key,
        now,
        lease_until: now + rng.i32(1..=4) * 250,
        expires_at: now + rng.i32(0..=6) * 250,
    };
    let key = rng.u8(0..KEYS);
    match rng.u8(0..7) {
        0 => Op::Claim(request(rng, key)),
        // With any token handed out so far: its own key's, another key's, a stale one.
        6 if tokens > 0 && extends => Op::Extend {
            key,
            token: rng.usize(..tokens),
            now,
            lease_until: now + rng.i32(1..=4) * 250,
            expires_at: now + rng.i32(0..=6) * 250,
        },
        1 | 2 if tokens > 0 => {
            let token = rng.usize(..tokens);
            if rng.bool() {
                Op::Complete {
                    key,
                    token,
                    expires_at: now + rng.i32(0..=6) * 250,
                }
            } else {
                Op::Release { key, token }
            }
        }
        3 if packs_allowed => {
            let other = (key + rng.u8(1..KEYS)) % KEYS;
            Op::Packed(vec![request(rng, key), request(rng, other)])
        }
        _ => Op::OneShot(request(rng, key)),
    }
}

/// What a run of sequences saw.
#[derive(Debug, Default)]
struct Tally {
    steps: usize,
    pairs: usize,
    contended: usize,
    packs: usize,
}

/// Runs `sequences` random sequences against `store`, `fresh` giving a store per sequence (or
/// the same one: each sequence has keys of its own).
async fn compare<S, F>(name: &str, sequences: u64, unit: ExpiryUnit, mut fresh: F) -> Tally
where
    S: ClaimStore,
    F: AsyncFnMut(u64) -> S,
{
    let mut tally = Tally::default();
    for seed in 0..sequences {
        let store = fresh(seed).await;
        let capabilities = store.capabilities();
        let shape = Shape {
            packs: capabilities.max_pack_actions >= 2,
            atomic_one_shot: capabilities.atomic_one_shot,
            extends_leases: capabilities.extends_leases,
        };
        let names = Names::new(seed);
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut model = Store::new(usize::from(KEYS), unit);
        let mut tokens: Vec<(Token, ClaimToken)> = Vec::new();
        let mut now: Millis = 0;
        for step in 0..STEPS {
            now += rng.i32(0..=3) * 250;
            tally.steps += 1;
            let (ops, gots, stagger) = if rng.u8(0..4) == 0 {
                // Two at once (two packs only where a pack is one atomic request: a store
                // that does not pack sends a pack's writes one by one, and two such packs on
                // the same keys need not be serializable as wholes).
                let extends = shape.extends_leases;
                let a = random_op(&mut rng, now, tokens.len(), true, extends);
                let two_packs = shape.packs || !matches!(a, Op::Packed(_));
                let b = random_op(&mut rng, now, tokens.len(), two_packs, extends);
                let stagger = Duration::from_millis(rng.u64(0..=20));
                let (got_a, got_b) = tokio::join!(ask_store(&store, &names, &a, &tokens), async {
                    tokio::time::sleep(stagger).await;
                    ask_store(&store, &names, &b, &tokens).await
                });
                tally.pairs += 1;
                (vec![a, b], vec![got_a, got_b], Some(stagger))
            } else {
                let op = random_op(&mut rng, now, tokens.len(), true, shape.extends_leases);
                let got = ask_store(&store, &names, &op, &tokens).await;
                (vec![op], vec![got], None)
            };
            tally.packs += ops.iter().filter(|op| matches!(op, Op::Packed(_))).count();
            tally.contended += gots.iter().filter(|g| g.contended()).count();
            if stagger.is_none() && gots[0].contended() {
                panic!(
                    "{name}, seed {seed} step {step}: {:?} alone was cancelled for contention: {:?}",
                    ops[0], gots[0]
                );
            }
            match follow(&model, &ops, &gots, &tokens, shape, &names) {
                Ok((next, acquired)) => {
                    model = next;
                    tokens.extend(acquired);
                }
                Err(failures) => panic!(
                    "{name} ({shape:?}), seed {seed} step {step}: {ops:?} (the second {stagger:?} \
                     later) answered as no serial order of the model's atomic steps does: \
                     {failures:#?}"
                ),
            }
        }
    }
    println!(
        "{name}: {sequences} sequences of {STEPS} steps on {KEYS} keys ({} steps, {} of them two \
         operations at once, {} packs, {} operations cancelled for contention): the model's \
         answers",
        tally.steps, tally.pairs, tally.packs, tally.contended
    );
    tally
}

#[tokio::test]
async fn the_memory_store_answers_as_the_model() {
    compare("memory", LOCAL_SEQUENCES, ExpiryUnit::Millis, async |_| {
        MemoryStore::new()
    })
    .await;
}

/// The warm cache of completed keys in front of a store answers as the store alone does.
#[tokio::test]
async fn the_cached_store_answers_as_the_model() {
    compare(
        "cached(memory)",
        LOCAL_SEQUENCES,
        ExpiryUnit::Millis,
        async |_| CachedStore::new(MemoryStore::new()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_store_answers_as_the_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    compare(
        "sqlite",
        LOCAL_SEQUENCES,
        ExpiryUnit::Millis,
        async |seed| {
            SqliteStore::open(dir.path().join(format!("claims-{seed}.db"))).expect("open SQLite")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_answers_as_the_model() {
    let store = servers::redis_store().await;
    compare("redis", SERVER_SEQUENCES, ExpiryUnit::Millis, async |_| {
        store.clone()
    })
    .await;
    servers::cleanup(store.connection(), store.prefix()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_answers_as_the_model() {
    let store = servers::pg_store("model").await;
    compare(
        "postgres",
        SERVER_SEQUENCES,
        ExpiryUnit::Millis,
        async |_| store.clone(),
    )
    .await;
    servers::drop_pg_store(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tiered_store_answers_as_the_model() {
    let durable = servers::pg_store("model_tiered").await;
    let cache = servers::redis_store().await;
    let store = TieredStore::new(cache.clone(), durable.clone());
    compare("tiered", SERVER_SEQUENCES, ExpiryUnit::Millis, async |_| {
        store.clone()
    })
    .await;
    servers::drop_pg_store(&durable).await;
    servers::cleanup(cache.connection(), cache.prefix()).await;
}

/// DynamoDB Local behind the conflict model: a pack (a `TransactWriteItems`) holds its items
/// while it is in flight, and a write on one of them sent meanwhile is cancelled, as DynamoDB
/// does. The pairs must then see some contention, or the rule was never exercised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dynamodb_store_behind_the_conflict_model_answers_as_the_model() {
    let proxy = ConflictProxy::start(&local::dynamodb_endpoint())
        .await
        .expect("conflict proxy");
    // A transaction lasts a few milliseconds at DynamoDB; the pairs are 0-20 ms apart.
    proxy.hold(Duration::from_millis(10));
    let store = support::dynamodb::dynamodb_store_at(&proxy.endpoint(), "model").await;
    let tally = compare(
        "dynamodb",
        SERVER_SEQUENCES,
        ExpiryUnit::Seconds,
        async |_| store.clone(),
    )
    .await;
    println!(
        "dynamodb: the conflict model cancelled {} requests",
        proxy.conflicts()
    );
    assert!(
        tally.contended > 0 && proxy.conflicts() > 0,
        "no operation was cancelled for contention: the conflict model was not exercised ({tally:?})"
    );
}
