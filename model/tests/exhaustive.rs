//! The exhaustive check: every property holds for the stated bounds, and each property's
//! mutant is caught. Prints the bounds and the state counts (`make check-model`).

use std::time::Instant;

use sqs_claim_model::Mutant;
use sqs_claim_model::checker::{Report, check};
use sqs_claim_model::protocol::{Config, Mode, Protocol, TICK, property};
use sqs_claim_model::store::{ExpiryUnit, NEVER};

const MAX_STATES: usize = 1_500_000;

/// The bounds: 2 workers (one clock 500 ms ahead), 1 message, one network fault, one crash,
/// no duplicate delivery, maxReceiveCount 2, completions kept 1.5 s in whole seconds; a claim
/// leased until the deadline (a store that does not extend leases), never extended.
fn safety(mode: Mode, mutant: Mutant) -> Config {
    Config {
        mode,
        drifts: vec![0, 500],
        messages: 1,
        faults: 1,
        crashes: 1,
        duplicates: 0,
        contention: 0,
        clock_jumps: 0,
        early_redeliveries: 0,
        max_receives: Some(2),
        lease: None,
        extensions: 0,
        wait_out_leases: false,
        claim_ttl: 1500,
        done_ttl: 1500,
        unit: ExpiryUnit::Seconds,
        mutant,
    }
}

/// Extended leases: a claim leased a tick past the worker's clock (never past the deadline),
/// extended once while the handler runs; a claim held elsewhere may wait the lease out once and
/// claim again.
fn extended(mode: Mode, mutant: Mutant) -> Config {
    Config {
        lease: Some(TICK),
        extensions: 1,
        wait_out_leases: true,
        ..safety(mode, mutant)
    }
}

/// Liveness: one message, no failure destination, a claim TTL beyond the horizon (24 hours), so only a
/// lapsed lease frees a dead worker's key; no network fault (a crash is the fault).
fn liveness(mode: Mode, mutant: Mutant) -> Config {
    Config {
        max_receives: None,
        faults: 0,
        claim_ttl: NEVER,
        done_ttl: NEVER,
        ..safety(mode, mutant)
    }
}

fn run(name: &str, config: Config) -> Report<Protocol> {
    let started = Instant::now();
    let report = check(&Protocol(config.clone()), MAX_STATES);
    let lease = match config.lease {
        None => "lease to the deadline".to_owned(),
        Some(span) => format!(
            "lease {span} ms, {} extensions{}",
            config.extensions,
            if config.wait_out_leases {
                ", held leases waited out"
            } else {
                ""
            }
        ),
    };
    println!(
        "{name}: {:?} workers (clock drift ms) x {} messages, faults {} crashes {} duplicates {} \
         contention {} clock jumps {} early redeliveries {} maxReceive {:?}, {lease}, {:?}, mutant \
         {:?}: {} states, {} transitions, \
         depth {}, {:.2?}; violated: {:?}",
        config.drifts,
        config.messages,
        config.faults,
        config.crashes,
        config.duplicates,
        config.contention,
        config.clock_jumps,
        config.early_redeliveries,
        config.max_receives,
        config.mode,
        config.mutant,
        report.states,
        report.transitions,
        report.depth,
        started.elapsed(),
        report
            .violations
            .iter()
            .map(|v| v.property)
            .collect::<Vec<_>>(),
    );
    report
}

#[test]
fn liveness_holds() {
    for mode in [Mode::Claimed, Mode::OneShot, Mode::Tiered] {
        let report = run("liveness", liveness(mode, Mutant::None));
        assert!(report.violations.is_empty());
    }
}

#[test]
fn every_property_holds_for_the_bounds() {
    for mode in [Mode::Claimed, Mode::OneShot, Mode::Tiered] {
        // Two keys: a second message interleaved with the first (fewer redeliveries).
        let two_keys = Config {
            messages: 2,
            duplicates: 0,
            max_receives: Some(1),
            ..safety(mode, Mutant::None)
        };
        for config in [two_keys, safety(mode, Mutant::None)] {
            holds(config);
        }
    }
}

/// Runs a check of the correct model and fails with the first counterexample.
fn holds(config: Config) {
    let report = run("correct", config);
    if let Some(v) = report.violations.first() {
        let steps: Vec<_> = v.trace.iter().map(|(a, _)| a).collect();
        panic!(
            "{} violated: {steps:#?}\nlast state: {:#?}",
            v.property,
            v.trace.last()
        );
    }
}

/// Packed one-shot writes: two messages, received one at a time or as a batch of two whose
/// writes go in one pack; one write cancelled on contention.
fn packed(mutant: Mutant) -> Config {
    Config {
        messages: 2,
        max_receives: Some(1),
        contention: 1,
        ..safety(Mode::Packed, mutant)
    }
}

#[test]
fn packed_writes_hold() {
    holds(packed(Mutant::None));
    holds(Config {
        max_receives: Some(2),
        contention: 0,
        ..packed(Mutant::None)
    });
    // A contention in a pack whose other write is refused (completed before a crash).
    holds(Config {
        max_receives: Some(2),
        faults: 0,
        ..packed(Mutant::None)
    });
    holds(Config {
        messages: 2,
        contention: 1,
        ..liveness(Mode::Packed, Mutant::None)
    });
    // A clock 500 ms behind: its hard stop after the true deadline, where Lambda freezes the
    // invocation (no partial batch response).
    holds(Config {
        drifts: vec![-500, 0],
        ..packed(Mutant::None)
    });
}

#[test]
fn contention_retries_hold() {
    for mode in [Mode::Claimed, Mode::OneShot, Mode::Tiered] {
        holds(Config {
            contention: 1,
            ..safety(mode, Mutant::None)
        });
        holds(Config {
            contention: 2,
            faults: 0,
            ..safety(mode, Mutant::None)
        });
    }
}

#[test]
fn sqs_duplicates_hold() {
    for mode in [Mode::Claimed, Mode::OneShot, Mode::Tiered] {
        holds(Config {
            duplicates: 1,
            ..safety(mode, Mutant::None)
        });
    }
}

/// A message reported failed shown again early (the library's redelivery backoff).
#[test]
fn early_redeliveries_hold() {
    for mode in [Mode::Claimed, Mode::OneShot, Mode::Tiered] {
        holds(Config {
            early_redeliveries: 1,
            ..safety(mode, Mutant::None)
        });
    }
    holds(Config {
        early_redeliveries: 1,
        max_receives: Some(2),
        faults: 0,
        contention: 0,
        ..packed(Mutant::None)
    });
    for mode in [Mode::Claimed, Mode::OneShot] {
        holds(Config {
            early_redeliveries: 1,
            ..liveness(mode, Mutant::None)
        });
    }
}

#[test]
fn clock_jumps_hold() {
    for mode in [Mode::Claimed, Mode::OneShot] {
        holds(Config {
            clock_jumps: 1,
            ..safety(mode, Mutant::None)
        });
    }
}

/// Three workers whose clocks differ by 500 ms each; three keys, packed in batches of two.
#[test]
fn three_workers_and_three_keys_hold() {
    for mode in [Mode::Claimed, Mode::OneShot] {
        holds(Config {
            drifts: vec![-500, 0, 500],
            ..safety(mode, Mutant::None)
        });
    }
    holds(Config {
        messages: 3,
        contention: 0,
        ..packed(Mutant::None)
    });
}

/// One of each: a network fault (safety only), a crash, an SQS duplicate, a contention, a
/// clock jump.
#[test]
fn every_fault_at_once_holds() {
    holds(Config {
        duplicates: 1,
        contention: 1,
        clock_jumps: 1,
        ..safety(Mode::OneShot, Mutant::None)
    });
    for mode in [Mode::Claimed, Mode::OneShot] {
        holds(Config {
            duplicates: 1,
            contention: 1,
            clock_jumps: 1,
            ..liveness(mode, Mutant::None)
        });
    }
}

fn caught(config: Config, property: &str) {
    let report = run("mutant", config);
    let found = report.violations.iter().find(|v| v.property == property);
    let Some(v) = found else {
        panic!("the checker missed the mutant: {property} holds");
    };
    println!(
        "  counterexample for {property:?}, {} steps:",
        v.trace.len()
    );
    for (action, _) in &v.trace {
        println!("    {action:?}");
    }
}

#[test]
fn an_unfenced_completion_is_caught() {
    caught(
        safety(Mode::Claimed, Mutant::UnfencedComplete),
        property::STALE_NEVER_WRITES,
    );
}

#[test]
fn an_unfenced_release_is_caught() {
    caught(
        safety(Mode::Claimed, Mutant::UnfencedRelease),
        property::STALE_NEVER_WRITES,
    );
}

#[test]
fn a_retry_without_the_same_token_rule_is_caught() {
    caught(
        safety(Mode::Claimed, Mutant::RetryReappliesEffects),
        property::NO_EFFECT_TWICE,
    );
    // Under a clock jump too: an effect twice is judged by the claim's own `now`, not by the
    // clock furthest ahead so far.
    caught(
        Config {
            clock_jumps: 1,
            crashes: 0,
            max_receives: Some(1),
            ..safety(Mode::Claimed, Mutant::RetryReappliesEffects)
        },
        property::NO_EFFECT_TWICE,
    );
}

#[test]
fn expiry_rounded_down_to_the_second_is_caught() {
    // With an SQS duplicate: the second worker, its clock 500 ms ahead, writes over the record
    // a second after it was written, inside its TTL but past the rounded-down expiry. (Without
    // a second delivery only a request whose times were clamped at the floor finds the record
    // expired early: an artefact of the abstraction, not a catch.)
    caught(
        Config {
            duplicates: 1,
            ..safety(Mode::OneShot, Mutant::ExpirySecondsRoundedDown)
        },
        property::NOT_OVERWRITTEN,
    );
}

#[test]
fn a_claim_that_ignores_the_status_is_caught() {
    caught(
        safety(Mode::Claimed, Mutant::ClaimIgnoresStatus),
        property::DUPLICATE_NEVER_RUNS,
    );
}

#[test]
fn a_held_message_acknowledged_is_caught() {
    // A claim is held elsewhere only for an SQS duplicate delivery (a redelivery comes after
    // the visibility timeout, past the holder's deadline).
    let config = Config {
        duplicates: 1,
        ..safety(Mode::Claimed, Mutant::HeldAcked)
    };
    caught(config, property::NO_MESSAGE_LOST);
}

#[test]
fn a_marker_written_for_a_refused_completion_is_caught() {
    // With an SQS duplicate: a completion that lands after its lease lapsed and another worker
    // took the key over is refused, the marker is written anyway, and the duplicate finds the
    // key "completed" with no effect committed. (Without the duplicate the catch needs times
    // clamped at the floor.)
    caught(
        Config {
            duplicates: 1,
            ..safety(Mode::Tiered, Mutant::TieredMarkerOnLostClaim)
        },
        property::NO_MESSAGE_LOST,
    );
}

#[test]
fn a_claim_that_ignores_the_lease_is_caught() {
    caught(
        liveness(Mode::Claimed, Mutant::ClaimIgnoresLease),
        property::EVENTUALLY_DONE,
    );
}

#[test]
fn an_unsent_write_counted_as_committed_is_caught() {
    caught(
        // A write refused because its key was completed before: the first message processed
        // alone, its answer lost, then redelivered in a batch with the second.
        Config {
            contention: 0,
            max_receives: Some(2),
            ..packed(Mutant::UnsentAcked)
        },
        property::NO_MESSAGE_LOST,
    );
}

#[test]
fn a_contended_write_counted_as_committed_is_caught() {
    caught(
        Config {
            contention: 1,
            ..safety(Mode::OneShot, Mutant::ContentionAcked)
        },
        property::NO_MESSAGE_LOST,
    );
}

/// The two-step one-shot of a store without an atomic one-shot (Redis, tiered): a claim, then a
/// completion with the effects, released if cancelled on contention and sent again as a new
/// claim.
#[test]
fn two_step_one_shot_holds() {
    for mode in [Mode::TwoStepOneShot, Mode::TieredTwoStepOneShot] {
        holds(safety(mode, Mutant::None));
        holds(Config {
            duplicates: 1,
            ..safety(mode, Mutant::None)
        });
        holds(Config {
            contention: 1,
            ..safety(mode, Mutant::None)
        });
        holds(Config {
            contention: 2,
            faults: 0,
            ..safety(mode, Mutant::None)
        });
        holds(liveness(mode, Mutant::None));
    }
    let mode = Mode::TwoStepOneShot;
    holds(Config {
        messages: 2,
        max_receives: Some(1),
        ..safety(mode, Mutant::None)
    });
    holds(Config {
        early_redeliveries: 1,
        ..safety(mode, Mutant::None)
    });
    holds(Config {
        clock_jumps: 1,
        ..safety(mode, Mutant::None)
    });
    holds(Config {
        early_redeliveries: 1,
        ..liveness(mode, Mutant::None)
    });
    holds(Config {
        duplicates: 1,
        contention: 1,
        ..liveness(mode, Mutant::None)
    });
}

/// The mutants that apply to the two-step one-shot, each caught in that mode (`UnsentAcked`
/// does not: no pack).
#[test]
fn mutants_are_caught_in_the_two_step_one_shot() {
    let mode = Mode::TwoStepOneShot;
    // A completion that lands after its lease lapsed and another worker took the key over.
    caught(
        safety(mode, Mutant::UnfencedComplete),
        property::STALE_NEVER_WRITES,
    );
    // The release after a completion cancelled on contention, landing late.
    caught(
        Config {
            contention: 1,
            ..safety(mode, Mutant::UnfencedRelease)
        },
        property::STALE_NEVER_WRITES,
    );
    // The completion applied twice on the wire.
    caught(
        safety(mode, Mutant::RetryReappliesEffects),
        property::NO_EFFECT_TWICE,
    );
    caught(
        safety(mode, Mutant::ClaimIgnoresStatus),
        property::DUPLICATE_NEVER_RUNS,
    );
    caught(
        Config {
            duplicates: 1,
            ..safety(mode, Mutant::ExpirySecondsRoundedDown)
        },
        property::NOT_OVERWRITTEN,
    );
    caught(
        Config {
            duplicates: 1,
            ..safety(mode, Mutant::HeldAcked)
        },
        property::NO_MESSAGE_LOST,
    );
    caught(
        Config {
            contention: 1,
            ..safety(mode, Mutant::ContentionAcked)
        },
        property::NO_MESSAGE_LOST,
    );
    caught(
        liveness(mode, Mutant::ClaimIgnoresLease),
        property::EVENTUALLY_DONE,
    ); // A completion that lands after its lease lapsed and the redelivery's claim took the key
    // over: refused, its marker written anyway, and an SQS duplicate finds the key "completed"
    // with no effect committed. The completion expires when its claim asked (no handler
    // between), before the redelivery with the TTL of the other checks: a TTL longer than the
    // visibility timeout here, as a real one is.
    caught(
        Config {
            duplicates: 1,
            done_ttl: 3000,
            ..safety(Mode::TieredTwoStepOneShot, Mutant::TieredMarkerOnLostClaim)
        },
        property::NO_MESSAGE_LOST,
    );
}

/// Extended leases ([`extended`]): the owner extends its short lease while the handler runs,
/// stops (its result discarded, nothing committed) when an extension is refused or not
/// answered, and may end its handler with an extension still on the wire; a paused owner's
/// lease lapses and another worker takes the key over (at once, or after waiting the lease
/// out), and the owner's extension and completion are then refused.
#[test]
fn extended_leases_hold() {
    for mode in [Mode::Claimed, Mode::Tiered] {
        holds(extended(mode, Mutant::None));
    }
    let mode = Mode::Claimed;
    // An SQS duplicate: a second worker meets the live owner's claim, waits its lease out and
    // takes the key over while the owner is paused.
    holds(Config {
        faults: 0,
        duplicates: 1,
        ..extended(mode, Mutant::None)
    });
    // Two extensions: a lease carried to the deadline.
    holds(Config {
        faults: 0,
        extensions: 2,
        ..extended(mode, Mutant::None)
    });
    // A message failed after a lost extension, shown again early: the retry finds the lease
    // lapsed and takes the key over.
    holds(Config {
        faults: 0,
        early_redeliveries: 1,
        ..extended(mode, Mutant::None)
    });
    holds(Config {
        faults: 0,
        contention: 1,
        ..extended(mode, Mutant::None)
    });
    // The two-step one-shot under a short lease (no handler: nothing to extend).
    holds(extended(Mode::TwoStepOneShot, Mutant::None));
    holds(Config {
        duplicates: 1,
        ..extended(Mode::TwoStepOneShot, Mutant::None)
    });
    // Liveness: a dead owner's short lease is taken over, a live owner's extended one is not
    // (taken over only once it lapsed).
    for mode in [Mode::Claimed, Mode::Tiered, Mode::TwoStepOneShot] {
        holds(Config {
            lease: Some(TICK),
            extensions: 1,
            wait_out_leases: true,
            ..liveness(mode, Mutant::None)
        });
    }
    holds(Config {
        lease: Some(TICK),
        extensions: 2,
        wait_out_leases: true,
        duplicates: 1,
        ..liveness(Mode::Claimed, Mutant::None)
    });
}

#[test]
fn an_unfenced_extension_is_caught() {
    // The owner extends, ends its handler (the extension still on the wire) and is cut off at
    // its deadline; the redelivery's claim takes the key over; the late extension takes it
    // back, and the owner's late completion commits.
    caught(
        Config {
            faults: 0,
            ..extended(Mode::Claimed, Mutant::UnfencedExtend)
        },
        property::LOST_OWNER_NEVER_COMMITS,
    );
}

#[test]
fn an_extension_of_a_completed_record_is_caught() {
    // An extension still on the wire when the handler ended lands after the completion and
    // moves the completed record's expiry back to the extension's: the redelivery (the
    // completion's answer cut off at the deadline) finds it expired and runs the handler again.
    caught(
        Config {
            faults: 0,
            ..extended(Mode::Claimed, Mutant::ExtendIgnoresStatus)
        },
        property::NOT_OVERWRITTEN,
    );
}

#[test]
fn a_lost_extension_acknowledged_is_caught() {
    // An SQS duplicate's worker takes the key over; the owner's extension is refused, and the
    // owner reports the message processed before the new owner committed anything.
    caught(
        Config {
            faults: 0,
            crashes: 0,
            duplicates: 1,
            ..extended(Mode::Claimed, Mutant::LostExtensionAcked)
        },
        property::NO_MESSAGE_LOST,
    );
}
