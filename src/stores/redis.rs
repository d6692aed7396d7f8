//! The Redis connection every replica shares: one multiplexed connection that reconnects by
//! itself, a deadline on every operation, and an outage that is logged once when it starts and
//! once when it ends (not once per call).

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::time::Instant;

use crate::{
    config::cluster::{ClusterSettings, FailMode},
    telemetry::cluster_metrics::ClusterMetrics,
};

/// Why a store operation gave no answer (the details go to the log, once per outage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreDown;

#[derive(Clone)]
pub struct Redis {
    conn: ConnectionManager,
    /// For the dedicated connections pub/sub needs.
    client: Arc<redis::Client>,
    prefix: Arc<str>,
    timeout: Duration,
    pub fail: FailMode,
    down: Arc<AtomicBool>,
    metrics: ClusterMetrics,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may hold a password.
        f.debug_struct("Redis")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Redis {
    /// Connects lazily: a gateway starts (and, with `fail = "local"`, serves) while Redis is down.
    pub fn open(
        url: &str,
        settings: &ClusterSettings,
        metrics: ClusterMetrics,
    ) -> Result<Self, super::ClusterError> {
        let client = redis::Client::open(url)
            .map_err(|e| super::ClusterError::Redis(crate::secret::redact_url(&e.to_string())))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.timeout))
            .set_response_timeout(Some(settings.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(2));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| super::ClusterError::Redis(e.to_string()))?;
        Ok(Self {
            conn,
            client: Arc::new(client),
            prefix: settings.key_prefix.as_str().into(),
            timeout: settings.timeout,
            fail: settings.fail,
            down: Arc::new(AtomicBool::new(false)),
            metrics,
        })
    }

    /// `prefix` + `parts` joined by `:`.
    pub fn key(&self, parts: &[&str]) -> String {
        let mut k = String::with_capacity(64);
        k.push_str(&self.prefix);
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                k.push(':');
            }
            k.push_str(p);
        }
        k
    }

    /// Runs one operation against Redis within the deadline, and records it.
    pub async fn run<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, StoreDown>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, f(self.conn.clone())).await;
        self.metrics
            .op("redis", op, started.elapsed().as_secs_f64());
        let error = match result {
            Ok(Ok(v)) => {
                if self.down.swap(false, Ordering::Relaxed) {
                    tracing::warn!("redis answers again: shared state is back in use");
                }
                return Ok(v);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", self.timeout),
        };
        self.metrics.op_failed("redis", op);
        if !self.down.swap(true, Ordering::Relaxed) {
            let then = match self.fail {
                FailMode::Local => {
                    "deciding per replica until it answers ([cluster] fail = \"local\")"
                }
                FailMode::Closed => {
                    "refusing what needs it until it answers ([cluster] fail = \"closed\")"
                }
            };
            tracing::error!(op, "redis unreachable: {error}; {then}");
        }
        Err(StoreDown)
    }

    /// The messages published on `channel` (under the key prefix) from now on, on a
    /// connection of their own; the stream ends when that connection drops.
    pub async fn subscribe(
        &self,
        channel: &str,
    ) -> Result<redis::aio::PubSubStream, super::ClusterError> {
        let channel = self.key(&[channel]);
        let connect = async {
            let mut ps = self.client.get_async_pubsub().await?;
            ps.subscribe(&channel).await?;
            redis::RedisResult::Ok(ps.into_on_message())
        };
        match tokio::time::timeout(self.timeout, connect).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(super::ClusterError::Subscribe(
                channel,
                crate::secret::redact_url(&e.to_string()),
            )),
            Err(_) => Err(super::ClusterError::Subscribe(
                channel,
                format!("no answer within {:?}", self.timeout),
            )),
        }
    }

    /// Publishes `payload` on `channel` (under the key prefix).
    pub async fn publish(&self, channel: &str, payload: String) -> Result<(), StoreDown> {
        let channel = self.key(&[channel]);
        self.run("publish", |mut c| async move {
            redis::AsyncCommands::publish::<_, _, ()>(&mut c, channel, payload).await
        })
        .await
    }

    /// Counts one fallback of `feature` in `mode` (the decision is `stores::fallback`'s).
    pub(super) fn count_fallback(&self, feature: &'static str, mode: &'static str) {
        self.metrics.fell_back(feature, mode);
    }
}
