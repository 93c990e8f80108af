//! The policies both front doors apply to a key: a payload that differs ([`PayloadCheck`]), a
//! key that is missing ([`MissingKey`]), and the namespace a key is stored under.

use std::borrow::Cow;

/// What to do when a key was completed before with a different payload fingerprint.
///
/// The SQS processor fingerprints a message's body, the idempotency layer a request (and its
/// route); both compare the fingerprint with the one stored by the completion, and a later
/// copy of a key in one SQS batch with its first copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PayloadCheck {
    /// Do not fingerprint payloads.
    Off,
    /// Log a warning and treat it as a duplicate (the processor skips the message, the layer
    /// replays the stored response).
    Warn,
    /// Refuse it (the default). The processor reports the message failed: it is retried, then
    /// reaches the DLQ, where a person can look at the conflicting payload. The layer answers
    /// "another request" (HTTP 422). Same key, other payload is a producer bug, and treating it
    /// as a duplicate silently could drop a payment.
    #[default]
    Fail,
}

/// What a key found done means for a payload, under the [`PayloadCheck`]: the one place the
/// policy is applied, by both front doors and by an operator's tool
/// ([`RecordClaim::judge`](crate::processor::RecordClaim::judge), `sqs-claim inspect --event`).
///
/// Public with the feature `admin` (what the operator's tool reads); the front doors' own
/// otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(not(feature = "admin"), allow(unreachable_pub))]
pub enum PayloadVerdict {
    /// The same payload, or no fingerprint to compare: a duplicate (the processor skips the
    /// message, the layer replays the stored response).
    Same,
    /// Another payload, and the policy refuses it ([`PayloadCheck::Fail`]): the processor
    /// fails the message (`payload_mismatch`), the layer answers "another request".
    Refused,
    /// Another payload, and the policy lets it pass as a duplicate, with a warning the front
    /// door writes ([`PayloadCheck::Warn`]).
    Tolerated,
}

impl PayloadCheck {
    /// Whether to fingerprint payloads at all.
    pub(crate) fn fingerprints(self) -> bool {
        self != PayloadCheck::Off
    }

    /// The verdict on a payload whose fingerprint is `ours`, for a key done with `theirs`.
    pub(crate) fn judge(self, ours: Option<&str>, theirs: Option<&str>) -> PayloadVerdict {
        self.judge_differs(differs(ours, theirs))
    }

    /// [`judge`](Self::judge) when it is already known whether the payloads differ (the copies
    /// of one key in an SQS batch are compared at planning).
    pub(crate) fn judge_differs(self, differs: bool) -> PayloadVerdict {
        match (differs, self) {
            (false, _) => PayloadVerdict::Same,
            (true, PayloadCheck::Fail) => PayloadVerdict::Refused,
            (true, PayloadCheck::Warn | PayloadCheck::Off) => PayloadVerdict::Tolerated,
        }
    }
}

/// Whether two fingerprints say "another payload": only when both exist and differ (a record
/// written without one, or a check that is off, compares as the same).
pub(crate) fn differs(ours: Option<&str>, theirs: Option<&str>) -> bool {
    matches!((ours, theirs), (Some(ours), Some(theirs)) if ours != theirs)
}

/// What to do with a message or request that does not carry the configured key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissingKey {
    /// Refuse it (the default). The processor reports the message failed: it is retried and,
    /// if it never gets a key, reaches the dead-letter queue where someone can look at it. The
    /// layer answers "no key" (HTTP 400).
    #[default]
    Fail,
    /// Run the handler without a claim: no deduplication for this message or request. Effects
    /// commit only with a claim's completion, so a handler that returns effects then fails
    /// (`missing_key`, nothing committed).
    ProcessWithoutDedup,
}

/// The environment variable Lambda names the function in.
const FUNCTION_NAME_ENV: &str = "AWS_LAMBDA_FUNCTION_NAME";

/// The namespace when none is set and no function name is known.
const DEFAULT_NAMESPACE: &str = "sqs-claim";

/// The key namespace (`namespace#key`), one rule for both front doors:
///
/// 1. the namespace set on the builder;
/// 2. else the function's name: the invocation context's, else `AWS_LAMBDA_FUNCTION_NAME` (read
///    when the processor or layer is built), so a local run with the variable set (no Lambda
///    context, `Context::default()`) uses the deployed function's namespace;
/// 3. else `sqs-claim`.
///
/// Inside Lambda the context and the variable name the same function.
#[derive(Debug, Clone, Default)]
pub(crate) struct Namespace {
    set: Option<String>,
    from_env: Option<String>,
}

impl Namespace {
    /// The namespace `namespace`, whatever the function.
    pub(crate) fn set(&mut self, namespace: String) {
        self.set = Some(namespace);
    }

    /// Reads the environment's function name, once, when the front door is built.
    pub(crate) fn read_env(mut self) -> Self {
        self.from_env = std::env::var(FUNCTION_NAME_ENV)
            .ok()
            .filter(|s| !s.is_empty());
        self
    }

    /// The namespace for an invocation with `context`.
    pub(crate) fn resolve<'a>(&'a self, context: &'a lambda_runtime::Context) -> Cow<'a, str> {
        match &self.set {
            Some(ns) => Cow::Borrowed(ns),
            None => Cow::Borrowed(self.function_name(context).unwrap_or(DEFAULT_NAMESPACE)),
        }
    }

    /// The function's name: the context's, else the environment's (step 2 of the rule).
    pub(crate) fn function_name<'a>(
        &'a self,
        context: &'a lambda_runtime::Context,
    ) -> Option<&'a str> {
        Some(context.env_config.function_name.as_str())
            .filter(|s| !s.is_empty())
            .or(self.from_env.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_rule() {
        let mut ctx = lambda_runtime::Context::default();
        let none = Namespace::default();
        assert_eq!(none.resolve(&ctx), "sqs-claim");
        let env = Namespace {
            set: None,
            from_env: Some("from-env".into()),
        };
        assert_eq!(env.resolve(&ctx), "from-env", "no context: the variable");
        ctx.env_config = std::sync::Arc::new(lambda_runtime::Config {
            function_name: "from-context".into(),
            ..Default::default()
        });
        assert_eq!(env.resolve(&ctx), "from-context");
        let mut set = env.clone();
        set.set("payments".into());
        assert_eq!(set.resolve(&ctx), "payments");
    }

    #[test]
    fn a_payload_is_refused_only_when_both_fingerprints_differ_under_fail() {
        use PayloadVerdict::*;
        let fail = PayloadCheck::Fail;
        assert_eq!(fail.judge(Some("a"), Some("a")), Same);
        assert_eq!(fail.judge(Some("a"), None), Same);
        assert_eq!(fail.judge(None, Some("a")), Same);
        assert_eq!(fail.judge(Some("a"), Some("b")), Refused);
        assert_eq!(PayloadCheck::Warn.judge(Some("a"), Some("b")), Tolerated);
        assert!(!PayloadCheck::Off.fingerprints());
    }
}
