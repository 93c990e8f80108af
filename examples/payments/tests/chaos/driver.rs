//! One chaos run on one store: invocations in worker processes on overlapping batches, killed,
//! stopped past their lease and resumed, under store faults; then the settle phase and the
//! checks.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use sqs_claim::store::epoch_millis;

use crate::stores::{Kind, Resources, Spec};
use crate::worker;
use sqs_claim_testkit::conflict::ConflictProxy;
use sqs_claim_testkit::fault::{Fault, FaultProxy};

/// Deduplication on (the reference consumer as shipped) or off (the control).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Dedup,
    Control,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Dedup => "dedup",
            Mode::Control => "control",
        }
    }
}

/// The knobs of a run (see the module docs of `tests/chaos.rs` for the variables).
#[derive(Debug, Clone)]
pub struct Config {
    pub secs: u64,
    pub workers: usize,
    pub faults: bool,
    pub budget_ms: u64,
}

/// Messages at once in the pool the batches are drawn from: small against 10 per batch and
/// several workers, so batches overlap heavily.
const WINDOW: usize = 24;
const MAX_BATCH: usize = 10;
/// A new message repeats an earlier order under a new message id (a producer sending twice).
const PRODUCER_DUP_P: f64 = 0.1;
/// A batch also carries a message already confirmed (its deletion was lost).
const ACK_LOST_P: f64 = 0.15;
const KILL_P: f64 = 0.3;
/// A kill or a stop lands this long after the start at most.
const KILL_WITHIN_MS: u64 = 700;
const STOP_P: f64 = 0.06;
/// Orders crediting one of a few shared accounts (contention) rather than their own.
const HOT_ACCOUNTS: usize = 8;
/// How long a worker may take to start (exec, runtime, store handles) before its deadline is
/// even taken; with the budget and the grace, when the watchdog kills a silent worker.
const INIT_ALLOWANCE: Duration = Duration::from_secs(5);
const HANG_GRACE: Duration = Duration::from_secs(5);
const SETTLE_ROUNDS: usize = 25;

struct Order {
    id: String,
    account: String,
    amount: i64,
}

struct Msg {
    id: String,
    order: usize,
    confirmed: bool,
    deliveries: u32,
    last_outcome: String,
}

enum Fate {
    Normal,
    Kill { at: Instant },
    Stop { at: Instant, resume: Instant },
}

struct Running {
    child: Child,
    msgs: Vec<usize>,
    fate: Fate,
    stopped: bool,
    was_stopped: bool,
    killed: bool,
    watchdog: Instant,
}

#[derive(Default)]
struct Stats {
    invocations: u64,
    answered: u64,
    killed: u64,
    stopped: u64,
    hung: u64,
    late: Vec<String>,
    worker_errors: Vec<String>,
    outcomes: BTreeMap<String, u64>,
    faults: BTreeMap<String, u64>,
    /// Smallest `deadline - answered` over answers that count (ms; negative = late).
    min_slack_ms: Option<i64>,
    /// Longest `answered - started` over answers that count (ms).
    max_answer_ms: i64,
    settle_rounds: usize,
    settle_messages: u64,
    late_after_stop: u64,
}

/// What one run found.
pub struct Report {
    pub kind: Kind,
    pub mode: Mode,
    pub summary: String,
    /// Broken invariants (dedup run) or a control that saw nothing (control run).
    pub violations: Vec<String>,
}

struct Run<'a> {
    cfg: &'a Config,
    mode: Mode,
    rng: fastrand::Rng,
    exe: PathBuf,
    spec_json: String,
    direct_json: String,
    dynamodb_endpoint: Option<(String, String)>,
    namespace: String,
    orders: Vec<Order>,
    msgs: Vec<Msg>,
    by_id: HashMap<String, usize>,
    /// Unconfirmed messages, oldest first.
    open: Vec<usize>,
    running: Vec<Running>,
    stats: Stats,
    /// The latest deadline handed out, epoch ms: every lease has lapsed after it.
    max_deadline_ms: i64,
}

pub async fn run(kind: Kind, mode: Mode, seed: u64, cfg: &Config) -> Result<Report, String> {
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    // DynamoDB Local queues overlapping transactions where DynamoDB cancels them: the workers
    // reach it through the conflict model, so the hot accounts' transactions conflict as
    // they would on AWS (and the faults, when on, sit in front of that).
    let conflicts = match kind {
        Kind::DynamoDb => {
            let proxy = ConflictProxy::start(&crate::stores::dynamodb_endpoint()?)
                .await
                .map_err(|e| format!("cannot start the conflict model: {e}"))?;
            proxy.hold(CONFLICT_HOLD);
            Some(proxy)
        }
        _ => None,
    };
    let res = Resources::new(
        kind,
        &run_id,
        conflicts.as_ref().map(ConflictProxy::endpoint),
    )?;
    res.init()
        .await
        .map_err(|e| format!("cannot prepare the {} store: {e}", kind.name()))?;
    let result = run_on(&res, mode, seed, cfg, &run_id).await;
    res.cleanup().await;
    if let Some(proxy) = conflicts {
        eprintln!(
            "chaos: {} {}: the conflict model cancelled {} writes (transactions overlapping \
             another in flight on an item)",
            kind.name(),
            mode.name(),
            proxy.conflicts()
        );
    }
    result
}

/// How long each DynamoDB transaction holds its items in the conflict model, beyond DynamoDB
/// Local's own answer time.
const CONFLICT_HOLD: Duration = Duration::from_millis(2);

async fn run_on(
    res: &Resources,
    mode: Mode,
    seed: u64,
    cfg: &Config,
    run_id: &str,
) -> Result<Report, String> {
    let mut proxies = Vec::new();
    if cfg.faults {
        for (name, addr) in &res.upstreams {
            let p = FaultProxy::start(*addr)
                .await
                .map_err(|e| format!("cannot start the fault proxy for {name}: {e}"))?;
            proxies.push((*name, p));
        }
    }
    let ports: Vec<u16> = proxies.iter().map(|(_, p)| p.port()).collect();
    let spec = res.via(&ports)?;
    let endpoint = |s: &Spec| match s {
        Spec::DynamoDb { endpoint, .. } => Some(endpoint.clone()),
        _ => None,
    };
    let mut run = Run {
        cfg,
        mode,
        rng: fastrand::Rng::with_seed(seed),
        exe: std::env::current_exe().map_err(|e| format!("path of this binary: {e}"))?,
        spec_json: serde_json::to_string(&spec).map_err(|e| e.to_string())?,
        direct_json: serde_json::to_string(&res.direct).map_err(|e| e.to_string())?,
        dynamodb_endpoint: endpoint(&spec).zip(endpoint(&res.direct)),
        namespace: format!("chaos-{run_id}"),
        orders: Vec::new(),
        msgs: Vec::new(),
        by_id: HashMap::new(),
        open: Vec::new(),
        running: Vec::new(),
        stats: Stats::default(),
        max_deadline_ms: 0,
    };
    let mut faults = Faults::new(
        proxies,
        res.sqlite_path.clone().filter(|_| cfg.faults),
        Instant::now(),
    );

    // Chaos.
    let end = Instant::now() + Duration::from_secs(cfg.secs);
    loop {
        let now = Instant::now();
        run.reap(now);
        if now < end {
            while run.running.len() < cfg.workers {
                run.spawn_chaos(end)?;
            }
            faults.tick(&mut run.rng, now, &mut run.stats);
        } else {
            faults.heal();
            if run.running.is_empty() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    faults.heal();
    let chaos_deliveries: u32 = run.msgs.iter().map(|m| m.deliveries).sum();

    // Settle: healthy store, every lease lapsed, redeliver until everything is confirmed.
    run.settle().await?;

    // Check.
    let balances = res.balances().await?;
    Ok(run.check(res.kind, seed, chaos_deliveries, &balances))
}

impl Run<'_> {
    fn new_message(&mut self) -> usize {
        let dup_of = (!self.orders.is_empty() && self.rng.f64() < PRODUCER_DUP_P).then(|| {
            self.rng
                .usize(self.orders.len().saturating_sub(50)..self.orders.len())
        });
        let order = match dup_of {
            Some(o) => o,
            None => {
                let i = self.orders.len();
                let account = if i.is_multiple_of(2) {
                    format!("hot-{}", (i / 2) % HOT_ACCOUNTS)
                } else {
                    format!("acct-{i}")
                };
                self.orders.push(Order {
                    id: format!("o-{i}"),
                    account,
                    amount: self.rng.i64(1..=9_999),
                });
                i
            }
        };
        let idx = self.msgs.len();
        let id = format!("m-{idx}");
        self.by_id.insert(id.clone(), idx);
        self.msgs.push(Msg {
            id,
            order,
            confirmed: false,
            deliveries: 0,
            last_outcome: "never delivered".into(),
        });
        self.open.push(idx);
        idx
    }

    /// Starts one invocation of the chaos phase, which ends at `end`.
    fn spawn_chaos(&mut self, end: Instant) -> Result<(), String> {
        while self.open.len() < WINDOW {
            self.new_message();
        }
        let size = self.rng.usize(1..=MAX_BATCH).min(self.open.len());
        let mut pool = self.open.clone();
        self.rng.shuffle(&mut pool);
        let mut batch: Vec<usize> = pool.into_iter().take(size).collect();
        if self.rng.f64() < ACK_LOST_P {
            let confirmed: Vec<usize> = (0..self.msgs.len())
                .filter(|&i| self.msgs[i].confirmed)
                .collect();
            if !confirmed.is_empty() {
                batch.push(confirmed[self.rng.usize(..confirmed.len())]);
            }
        }
        let budget = Duration::from_millis(self.cfg.budget_ms);
        let now = Instant::now();
        let roll = self.rng.f64();
        let fate = if roll < KILL_P {
            // Most invocations answer within a second: half the kills land in that span,
            // the others anywhere in the budget (slow invocations, stalled stores).
            let within = if self.rng.bool() {
                KILL_WITHIN_MS
            } else {
                self.cfg.budget_ms
            };
            Fate::Kill {
                at: now + Duration::from_millis(self.rng.u64(0..within)),
            }
        } else if roll < KILL_P + STOP_P
            // A stopped worker resumes a budget and up to 2.7 s later: none is started so
            // late that the run would wait for it long after the chaos phase.
            && now + budget + Duration::from_secs(3) < end
        {
            let at = now + Duration::from_millis(self.rng.u64(0..KILL_WITHIN_MS));
            // Resumed after its lease has lapsed: another worker may have taken the claim
            // over, and this one's extension and completion must be fenced off. Half resume
            // past the deadline; the others inside it, past the short lease the claim was
            // taken with (a quarter of the budget, at least 2 s), where a resumed handler
            // finds its extension refused and must stop before it commits anything.
            let lease_ms = (self.cfg.budget_ms / 4).max(2_000);
            let resume = if self.rng.bool() || lease_ms >= self.cfg.budget_ms {
                at + budget + Duration::from_millis(self.rng.u64(500..2_000))
            } else {
                at + Duration::from_millis(self.rng.u64(lease_ms..self.cfg.budget_ms))
            };
            Fate::Stop { at, resume }
        } else {
            Fate::Normal
        };
        self.spawn(batch, fate, false)
    }

    fn spawn(&mut self, batch: Vec<usize>, fate: Fate, settle: bool) -> Result<(), String> {
        let records: Vec<Value> = batch
            .iter()
            .map(|&m| {
                self.msgs[m].deliveries += 1;
                let msg = &self.msgs[m];
                let order = &self.orders[msg.order];
                let delivery = uuid::Uuid::new_v4().to_string();
                json!({
                    "messageId": msg.id,
                    "receiptHandle": format!("rh-{delivery}"),
                    "body": json!({
                        "order_id": order.id,
                        "account": order.account,
                        "amount_cents": order.amount,
                    }).to_string(),
                    "attributes": {
                        "ApproximateReceiveCount": msg.deliveries.to_string(),
                        "SentTimestamp": "1700000000000",
                    },
                    "messageAttributes": {
                        worker::DELIVERY_ATTRIBUTE: {
                            "stringValue": delivery,
                            "stringListValues": [],
                            "binaryListValues": [],
                            "dataType": "String",
                        },
                    },
                    "md5OfBody": "",
                    "eventSource": "aws:sqs",
                    "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:chaos",
                    "awsRegion": "us-east-1",
                })
            })
            .collect();
        let event = json!({ "Records": records }).to_string();
        let (spec, endpoint) = if settle {
            (
                &self.direct_json,
                self.dynamodb_endpoint.as_ref().map(|(_, d)| d),
            )
        } else {
            (
                &self.spec_json,
                self.dynamodb_endpoint.as_ref().map(|(p, _)| p),
            )
        };
        let mut cmd = Command::new(&self.exe);
        cmd.arg(crate::WORKER_FLAG)
            .env(worker::SPEC, spec)
            .env(worker::MODE, self.mode.name())
            .env(worker::NAMESPACE, &self.namespace)
            .env(worker::BUDGET_MS, self.cfg.budget_ms.to_string())
            .env(worker::SEED, self.rng.u64(..).to_string())
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(endpoint) = endpoint {
            cmd.env("AWS_ENDPOINT_URL_DYNAMODB", endpoint);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start a worker process: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A few kB: fits the pipe, so this does not wait for the worker.
            stdin
                .write_all(event.as_bytes())
                .map_err(|e| format!("cannot hand the batch to a worker: {e}"))?;
        }
        let budget = Duration::from_millis(self.cfg.budget_ms);
        let now = Instant::now();
        let mut watchdog = now + INIT_ALLOWANCE + budget + HANG_GRACE;
        if let Fate::Stop { resume, .. } = fate {
            watchdog = watchdog.max(resume + budget + HANG_GRACE);
        }
        self.stats.invocations += 1;
        self.running.push(Running {
            child,
            msgs: batch,
            fate,
            stopped: false,
            was_stopped: false,
            killed: false,
            watchdog,
        });
        Ok(())
    }

    /// Applies the fates that are due and collects the workers that exited.
    fn reap(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.running.len() {
            let r = &mut self.running[i];
            match r.child.try_wait() {
                Ok(Some(_)) | Err(_) => {
                    let r = self.running.swap_remove(i);
                    self.finish(r);
                    continue;
                }
                Ok(None) => {}
            }
            let pid = r.child.id();
            match r.fate {
                Fate::Kill { at } if now >= at && !r.killed => {
                    let _ = r.child.kill();
                    r.killed = true;
                    self.stats.killed += 1;
                }
                Fate::Stop { at, resume } => {
                    if !r.stopped && !r.was_stopped && now >= at {
                        signal(pid, libc::SIGSTOP);
                        r.stopped = true;
                        r.was_stopped = true;
                        self.stats.stopped += 1;
                    } else if r.stopped && now >= resume {
                        signal(pid, libc::SIGCONT);
                        r.stopped = false;
                    }
                }
                _ => {}
            }
            if now >= r.watchdog && !r.killed {
                if r.stopped {
                    signal(pid, libc::SIGCONT);
                }
                let _ = r.child.kill();
                r.killed = true;
                let msgs = r.msgs.clone();
                self.stats.hung += 1;
                let line = format!(
                    "a worker (batch {}) had not answered {} s after its deadline: killed",
                    self.batch_ids(&msgs),
                    HANG_GRACE.as_secs()
                );
                self.stats.late.push(line);
            }
            i += 1;
        }
    }

    fn batch_ids(&self, msgs: &[usize]) -> String {
        msgs.iter()
            .map(|&m| self.msgs[m].id.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn finish(&mut self, mut r: Running) {
        let status = r.child.wait();
        let mut stdout = String::new();
        let mut stderr = String::new();
        if let Some(mut s) = r.child.stdout.take() {
            let _ = s.read_to_string(&mut stdout);
        }
        if let Some(mut s) = r.child.stderr.take() {
            let _ = s.read_to_string(&mut stderr);
        }
        // An answer written before a kill landed still counts, as Lambda's would.
        let answer = stdout
            .lines()
            .find_map(|l| serde_json::from_str::<Value>(l).ok());
        let Some(answer) = answer else {
            // Its deadline, so its leases, came at most a budget after its start, which was
            // before now.
            let lease_bound = epoch_millis(SystemTime::now()) + self.cfg.budget_ms as i64;
            self.max_deadline_ms = self.max_deadline_ms.max(lease_bound);
            if !r.killed {
                let code = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                self.stats.worker_errors.push(format!(
                    "worker exited ({code}) without an answer: {}",
                    stderr.trim()
                ));
            }
            return;
        };
        self.stats.answered += 1;
        let at = |k: &str| answer[k].as_i64().unwrap_or_default();
        let (started, deadline, answered) =
            (at("started_ms"), at("deadline_ms"), at("answered_ms"));
        let slack = deadline - answered;
        self.max_deadline_ms = self.max_deadline_ms.max(deadline);
        if r.was_stopped {
            // Frozen by us past its deadline: it cannot answer in time (Lambda would have
            // killed it); it ran on so that its late completions meet the fence.
            if slack < 0 {
                self.stats.late_after_stop += 1;
            }
        } else {
            self.stats.min_slack_ms = Some(self.stats.min_slack_ms.map_or(slack, |s| s.min(slack)));
            self.stats.max_answer_ms = self.stats.max_answer_ms.max(answered - started);
            if slack < 0 {
                self.stats.late.push(format!(
                    "batch {} answered {} ms after its deadline ({} ms budget)",
                    self.batch_ids(&r.msgs),
                    -slack,
                    deadline - started
                ));
            }
        }
        let outcomes = answer["outcomes"].as_array().cloned().unwrap_or_default();
        for o in outcomes {
            let name = o["outcome"].as_str().unwrap_or("?").to_owned();
            let Some(&m) = o["message_id"].as_str().and_then(|id| self.by_id.get(id)) else {
                self.stats
                    .worker_errors
                    .push(format!("an outcome for an unknown message: {o}"));
                continue;
            };
            let step = o["detail"]
                .as_str()
                .filter(|_| name == "cut_off" || name == "failed")
                .and_then(|d| d.split(':').next())
                .map(|d| format!("{name}/{d}"))
                .unwrap_or_else(|| name.clone());
            *self.stats.outcomes.entry(step).or_default() += 1;
            let msg = &mut self.msgs[m];
            msg.last_outcome = match o["detail"].as_str() {
                Some(d) => format!("{name}: {d}"),
                None => name.clone(),
            };
        }
        // Confirmed means deleted: SQS deletes every message of the batch that the partial
        // batch response does not list, whatever the outcomes say.
        let retry: Vec<&str> = answer["retry"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for &m in &r.msgs {
            let msg = &mut self.msgs[m];
            if !msg.confirmed && !retry.contains(&msg.id.as_str()) {
                msg.confirmed = true;
                self.open.retain(|&x| x != m);
            }
        }
    }

    async fn settle(&mut self) -> Result<(), String> {
        for round in 1..=SETTLE_ROUNDS {
            // Every lease handed out so far has lapsed after this.
            let wait = self.max_deadline_ms + 100 - epoch_millis(SystemTime::now());
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait as u64)).await;
            }
            if self.open.is_empty() {
                return Ok(());
            }
            self.stats.settle_rounds = round;
            let pending = self.open.clone();
            self.stats.settle_messages += pending.len() as u64;
            let mut batches = pending.chunks(MAX_BATCH).map(<[usize]>::to_vec);
            loop {
                self.reap(Instant::now());
                while self.running.len() < self.cfg.workers {
                    match batches.next() {
                        Some(b) => self.spawn(b, Fate::Normal, true)?,
                        None => break,
                    }
                }
                if self.running.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        Ok(())
    }

    fn check(
        &self,
        kind: Kind,
        seed: u64,
        chaos_deliveries: u32,
        balances: &[(String, i64)],
    ) -> Report {
        let mut violations = Vec::new();
        let got: HashMap<&str, i64> = balances.iter().map(|(a, b)| (a.as_str(), *b)).collect();
        // Orders with an account of their own: the balance says how many times each was
        // credited. Shared accounts: only the sum can be checked.
        let (mut once, mut doubles, mut lost) = (0usize, Vec::new(), Vec::new());
        let mut hot_expected: BTreeMap<&str, i64> = BTreeMap::new();
        for o in &self.orders {
            if o.account.starts_with("hot-") {
                *hot_expected.entry(o.account.as_str()).or_default() += o.amount;
                continue;
            }
            let balance = got.get(o.account.as_str()).copied().unwrap_or(0);
            let (times, rest) = (balance / o.amount, balance % o.amount);
            match (times, rest) {
                (1, 0) => once += 1,
                (0, 0) => lost.push(format!("order {} ({}) never credited", o.id, o.account)),
                (n, 0) => {
                    doubles.push(format!("order {} ({}) credited {n} times", o.id, o.account))
                }
                _ => lost.push(format!(
                    "order {} ({}): balance {balance} is not a multiple of its amount {}",
                    o.id, o.account, o.amount
                )),
            }
        }
        let mut hot_off = Vec::new();
        for (account, want) in &hot_expected {
            let have = got.get(account).copied().unwrap_or(0);
            if have != *want {
                hot_off.push(format!(
                    "account {account}: balance {have}, expected {want} ({:+})",
                    have - want
                ));
            }
        }
        for (account, _) in balances {
            let known = account.starts_with("hot-") && hot_expected.contains_key(account.as_str())
                || self.orders.iter().any(|o| &o.account == account);
            if !known {
                violations.push(format!(
                    "a balance for an account no order names: {account}"
                ));
            }
        }
        let unconfirmed: Vec<String> = self
            .open
            .iter()
            .take(5)
            .map(|&m| format!("{} ({})", self.msgs[m].id, self.msgs[m].last_outcome))
            .collect();
        if !self.open.is_empty() {
            violations.push(format!(
                "{} messages still unconfirmed after {SETTLE_ROUNDS} settle rounds, e.g. {}",
                self.open.len(),
                unconfirmed.join("; ")
            ));
        }
        let double_credits = doubles.len() + hot_off.iter().filter(|h| h.contains("(+")).count();
        let mut credit_problems: Vec<String> = Vec::new();
        credit_problems.extend(doubles.iter().take(5).cloned());
        credit_problems.extend(lost.iter().take(5).cloned());
        credit_problems.extend(hot_off.iter().take(5).cloned());
        match self.mode {
            Mode::Dedup => {
                if !doubles.is_empty() || !lost.is_empty() || !hot_off.is_empty() {
                    violations.push(format!(
                        "credits not exactly once: {} orders credited more than once, {} lost, \
                         {} shared accounts off: {}",
                        doubles.len(),
                        lost.len(),
                        hot_off.len(),
                        credit_problems.join("; ")
                    ));
                }
            }
            Mode::Control => {
                if !lost.is_empty() {
                    violations.push(format!(
                        "credits lost in the control run: {}",
                        lost.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
                    ));
                }
                if double_credits == 0 {
                    violations.push(
                        "the control run (deduplication off) found no double credit: the \
                         harness cannot see a broken deduplication"
                            .into(),
                    );
                }
            }
        }
        let s = &self.stats;
        if !s.late.is_empty() {
            violations.push(format!(
                "{} answers after their deadline: {}",
                s.late.len(),
                s.late
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        if !s.worker_errors.is_empty() {
            violations.push(format!(
                "{} workers failed: {}",
                s.worker_errors.len(),
                s.worker_errors
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        let faults = if s.faults.is_empty() {
            "none".to_owned()
        } else {
            s.faults
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let outcomes = s
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let producer_dups = self.msgs.len() - self.orders.len();
        let credits = match self.mode {
            Mode::Dedup => format!(
                "credits: {once} own-account orders exactly once, {} more than once, {} lost; \
                 {} shared accounts, {} off",
                doubles.len(),
                lost.len(),
                hot_expected.len(),
                hot_off.len()
            ),
            Mode::Control => format!(
                "credits: {double_credits} double credits detected (expected: deduplication is \
                 off), e.g. {}",
                credit_problems
                    .iter()
                    .take(2)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        };
        let summary = format!(
            "chaos {store} [{mode}] seed {seed}, {secs} s, {workers} workers, {budget} ms \
             budget:\n  {inv} invocations: {ans} answered, {killed} killed, {stopped} stopped past \
             their lease ({late_stop} of them answered late once resumed, as expected), {hung} \
             hung\n  store faults: {faults}\n  outcomes: {outcomes}\n  {orders} orders in {msgs} \
             messages ({producer_dups} sent twice by the producer), {chaos_deliveries} deliveries \
             under chaos; settle: {rounds} rounds, {settled} redeliveries\n  {credits}\n  answers: \
             slowest {max_answer} ms, {slack}, {late} late",
            store = kind.name(),
            mode = self.mode.name(),
            secs = self.cfg.secs,
            workers = self.cfg.workers,
            budget = self.cfg.budget_ms,
            inv = s.invocations,
            ans = s.answered,
            killed = s.killed,
            stopped = s.stopped,
            late_stop = s.late_after_stop,
            hung = s.hung,
            orders = self.orders.len(),
            msgs = self.msgs.len(),
            rounds = s.settle_rounds,
            settled = s.settle_messages,
            max_answer = s.max_answer_ms,
            slack = match s.min_slack_ms {
                None => "no answer".to_owned(),
                Some(v) if v < 0 => format!("latest {} ms past its deadline", -v),
                Some(v) => format!("closest {v} ms before its deadline"),
            },
            late = s.late.len(),
        );
        Report {
            kind,
            mode: self.mode,
            summary,
            violations,
        }
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) on a child this process started and has not reaped yet (it is
        // still in `running`), so the pid cannot have been reused.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The store faults of a run: one at a time, on one of the run's proxies (or, for SQLite, an
/// exclusive lock held by another connection), with healthy spells in between.
struct Faults {
    proxies: Vec<(&'static str, FaultProxy)>,
    sqlite: Option<PathBuf>,
    next: Instant,
    active: Option<(usize, Instant)>,
    lock: Option<std::thread::JoinHandle<()>>,
}

impl Faults {
    fn new(
        proxies: Vec<(&'static str, FaultProxy)>,
        sqlite: Option<PathBuf>,
        now: Instant,
    ) -> Self {
        Faults {
            proxies,
            sqlite,
            next: now + Duration::from_secs(1),
            active: None,
            lock: None,
        }
    }

    fn tick(&mut self, rng: &mut fastrand::Rng, now: Instant, stats: &mut Stats) {
        if let Some((p, end)) = self.active {
            if now < end {
                return;
            }
            if let Some((_, proxy)) = self.proxies.get(p) {
                proxy.set(Fault::Pass);
            }
            self.active = None;
            self.next = now + Duration::from_millis(rng.u64(500..2_000));
        }
        if now < self.next {
            return;
        }
        let ms = |rng: &mut fastrand::Rng, lo: u64, hi: u64| Duration::from_millis(rng.u64(lo..hi));
        if let Some(path) = &self.sqlite {
            if self.lock.as_ref().is_some_and(|h| !h.is_finished()) {
                return;
            }
            // Longer than the 5 s busy timeout now and then: writers then fail, not only wait.
            let hold = ms(rng, 300, 6_500);
            let path = path.clone();
            self.lock = Some(std::thread::spawn(move || hold_lock(&path, hold)));
            *stats.faults.entry("sqlite lock".to_owned()).or_default() += 1;
            self.next = now + hold + ms(rng, 1_000, 3_000);
            return;
        }
        if self.proxies.is_empty() {
            self.next = now + Duration::from_secs(3600);
            return;
        }
        let p = rng.usize(..self.proxies.len());
        let (name, proxy) = &self.proxies[p];
        let (fault, hold) = match rng.u8(0..4) {
            0 => ("stall", ms(rng, 300, 3_000)),
            1 => ("dark", ms(rng, 300, 3_000)),
            2 => ("drop-answers", ms(rng, 30, 400)),
            // Every connection reset, and new ones too for a moment (a server restarting).
            _ => ("reset", ms(rng, 20, 300)),
        };
        *stats.faults.entry(format!("{name} {fault}")).or_default() += 1;
        proxy.set(match fault {
            "stall" => Fault::Stall,
            "dark" => Fault::Dark,
            "drop-answers" => Fault::DropAnswer,
            _ => Fault::Reset,
        });
        self.active = Some((p, now + hold));
    }

    fn heal(&mut self) {
        for (_, p) in &self.proxies {
            p.set(Fault::Pass);
        }
        self.active = None;
        if let Some(h) = self.lock.take() {
            let _ = h.join();
        }
    }
}

/// Holds SQLite's write lock on `path` for `hold` from another connection: every worker's
/// claim and completion waits on it (and fails past the busy timeout).
fn hold_lock(path: &std::path::Path, hold: Duration) {
    let Ok(conn) = rusqlite::Connection::open(path) else {
        return;
    };
    let _ = conn.busy_timeout(Duration::from_secs(10));
    if conn.execute_batch("BEGIN IMMEDIATE").is_ok() {
        std::thread::sleep(hold);
        let _ = conn.execute_batch("COMMIT");
    }
}
