//! From settings to a running consumer: the store they name, opened ([`Settings::open_store`]),
//! and a processor builder configured as they say ([`Settings::configure`]).

use crate::processor::ProcessorBuilder;
use crate::store::{BoxStore, CachedStore};
use crate::{Error, Lease};

use super::Settings;

impl Settings {
    /// The Lambda consumer's store ([`Settings::lambda_store`]: `SQS_CLAIM_STORE`, else
    /// `dynamodb:$SQS_CLAIM_TABLE`), opened and checked within
    /// [`startup_timeout`](Settings::startup_timeout) ([`StoreUrl::open_checked`](super::StoreUrl::open_checked)),
    /// behind an in-process cache of completed keys when `SQS_CLAIM_WARM_CACHE` is set
    /// ([`CachedStore`]).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), sqs_claim::Error> {
    /// use sqs_claim::settings::Settings;
    /// use sqs_claim::{Message, Processor};
    /// use tower::service_fn;
    ///
    /// let settings = Settings::from_env()?;
    /// let store = settings.open_store().await?;
    /// let handler = service_fn(|msg: Message| async move {
    ///     let _order: serde_json::Value = msg.json()?;
    ///     Ok::<(), sqs_claim::Error>(())
    /// });
    /// // Every builder setting; with feature `sqs`, `configure_all` adds the failure queue
    /// // and the backoff (SQS_CLAIM_FAILURE_QUEUE_URL, SQS_CLAIM_BACKOFF*).
    /// let processor = settings.configure(Processor::builder(store, handler)).build();
    /// sqs_claim::lambda::run(processor).await;
    /// # Ok(()) }
    /// ```
    pub async fn open_store(&self) -> Result<BoxStore, Error> {
        let store = self
            .lambda_store()?
            .open_checked(self.startup_timeout)
            .await?;
        Ok(self.with_warm_cache(store))
    }

    /// `store` behind an in-process cache of `SQS_CLAIM_WARM_CACHE` completed keys, or `store`
    /// itself when the variable is unset.
    pub fn with_warm_cache(&self, store: BoxStore) -> BoxStore {
        match self.warm_cache {
            Some(entries) => BoxStore::new(CachedStore::new(store).with_capacity(entries)),
            None => store,
        }
    }

    /// `builder` configured as these settings say: the key source and namespace where set
    /// (unset, the builder keeps what it was given: the consumer's own defaults), the
    /// envelope, TTL, lease, FIFO mode, the store-unavailable policy, the deadline margin and
    /// answer reserve, the concurrency and handler timeout where set, the Powertools key format
    /// (feature `powertools`) and the EMF metrics line (`SQS_CLAIM_METRICS_NAMESPACE`).
    ///
    /// The steps that need an SQS client (the failure queue, the per-message backoff) are not
    /// applied here: [`Settings::configure_all`] (feature `sqs`) applies this and them, with a
    /// client from the standard AWS environment, and [`Settings::configure_sqs`] them alone,
    /// with a client of yours. A consumer that sets `SQS_CLAIM_FAILURE_QUEUE_URL` or
    /// `SQS_CLAIM_BACKOFF` wants one of the two.
    pub fn configure<S, H>(&self, builder: ProcessorBuilder<S, H>) -> ProcessorBuilder<S, H> {
        let mut builder = builder
            .envelope(self.envelope)
            .ttl(self.ttl)
            .lease_policy(match self.lease_at_least {
                Some(at_least) => Lease::at_least(at_least),
                None => Lease::extended(self.lease),
            })
            .fifo(self.fifo)
            .on_store_unavailable(self.store_unavailable)
            .deadline_margin(self.deadline_margin)
            .answer_reserve(self.answer_reserve);
        if let Some(key) = &self.key {
            builder = builder.key(key.clone());
        }
        if let Some(namespace) = &self.namespace {
            builder = builder.namespace(namespace.clone());
        }
        // Unset: what the store carries (256 for DynamoDB, the pool for PostgreSQL).
        if let Some(n) = self.concurrency {
            builder = builder.concurrency(n);
        }
        if let Some(limit) = self.handler_timeout {
            builder = builder.handler_timeout(limit);
        }
        // A Powertools-written table: its keys (the namespace does not enter them) and its
        // `validation` hashes, in both modes.
        #[cfg(feature = "powertools")]
        if let Some(format) = &self.powertools {
            builder = builder.key_format(format.clone());
        }
        // Validated when the settings were read; `Emf` writes to stdout inside Lambda.
        if let Some(emf) = self
            .metrics_namespace
            .as_deref()
            .and_then(|ns| crate::metrics::Emf::new(ns).ok())
        {
            builder = builder.metrics(emf);
        }
        builder
    }

    /// Whether any setting needs an SQS client: a failure queue or the per-message backoff.
    pub fn needs_sqs(&self) -> bool {
        self.failure_queue_url.is_some() || self.backoff.is_some()
    }

    /// [`configure`](Self::configure), then, when a failure queue or the backoff is set,
    /// [`configure_sqs`](Self::configure_sqs) with an SQS client on the standard AWS
    /// environment ([`aws::sqs_client`](crate::aws::sqs_client)), and with feature `s3`, when
    /// `SQS_CLAIM_LARGE_MESSAGES=on`, the [`large_message_reader`](Self::large_message_reader)
    /// on an S3 client of that environment ([`aws::s3_client`](crate::aws::s3_client)): every
    /// builder setting the `SQS_CLAIM_*` variables give.
    #[cfg(feature = "sqs")]
    pub async fn configure_all<S, H>(
        &self,
        builder: ProcessorBuilder<S, H>,
    ) -> ProcessorBuilder<S, H> {
        #[cfg_attr(not(feature = "s3"), allow(unused_mut))]
        let mut builder = self.configure(builder);
        #[cfg(feature = "s3")]
        let needs_s3 = self.large_messages;
        #[cfg(not(feature = "s3"))]
        let needs_s3 = false;
        if !needs_s3 && !self.needs_sqs() {
            return builder;
        }
        // One AWS configuration (one HTTPS client, one TLS context) for both clients.
        let config = crate::aws::load_config().await;
        #[cfg(feature = "s3")]
        if needs_s3 && let Some(large) = self.large_message_reader(&crate::aws::s3_client(&config))
        {
            builder = builder.large_messages(large);
        }
        if !self.needs_sqs() {
            return builder;
        }
        self.configure_sqs(builder, &crate::aws::sqs_client(&config))
    }

    /// The reader of the extended clients' S3 pointers these settings ask for
    /// (`SQS_CLAIM_LARGE_MESSAGES=on`, `SQS_CLAIM_LARGE_MESSAGE_MAX_BYTES`,
    /// `SQS_CLAIM_LARGE_MESSAGE_DELETE`, `SQS_CLAIM_LARGE_MESSAGE_BUCKETS`), on `client`;
    /// `None` when off.
    /// [`configure_all`](Self::configure_all) sets it on the builder.
    ///
    /// *Feature `s3`.*
    #[cfg(feature = "s3")]
    pub fn large_message_reader(
        &self,
        client: &aws_sdk_s3::Client,
    ) -> Option<crate::large::LargeMessages> {
        self.large_messages.then(|| {
            crate::large::LargeMessages::new(client.clone())
                .max_bytes(self.large_message_max_bytes)
                .delete_after_completion(self.large_message_delete)
                .allowed_buckets(self.large_message_buckets.iter().cloned())
        })
    }

    /// `builder` with the after-batch steps that talk to SQS through `client`, where
    /// configured: the failure destination (`SQS_CLAIM_FAILURE_QUEUE_URL`,
    /// `SQS_CLAIM_MAX_RECEIVES`, `SQS_CLAIM_DEAD_LETTER_AT_ONCE`) and the per-message
    /// visibility changes (`SQS_CLAIM_BACKOFF*`, `SQS_CLAIM_SOURCE_QUEUE_URL`).
    #[cfg(feature = "sqs")]
    pub fn configure_sqs<S, H>(
        &self,
        builder: ProcessorBuilder<S, H>,
        client: &aws_sdk_sqs::Client,
    ) -> ProcessorBuilder<S, H> {
        let mut builder = builder;
        if let Some(url) = &self.failure_queue_url {
            builder = builder.failure_destination(
                crate::FailureDestination::sqs(client.clone(), url.clone())
                    .after_receives(self.max_receives)
                    .at_once(self.dead_letter_at_once.clone()),
            );
        }
        if let Some(backoff) = self.backoff {
            let mut r = crate::Redelivery::sqs(client.clone()).backoff(backoff);
            for (kind, policy) in &self.backoff_for {
                r = r.backoff_for(*kind, *policy);
            }
            if let Some(url) = &self.source_queue_url {
                r = r.queue_url(url.clone());
            }
            builder = builder.redelivery(r);
        }
        builder
    }
}
