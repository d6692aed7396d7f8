//! Client transport for the legacy HTTP+SSE protocol (2024-11-05), which rmcp no longer ships.
//!
//! GET the SSE URL; the first `endpoint` event names the URL to POST messages to; every
//! `message` event carries one JSON-RPC message from the server.

use std::{collections::BTreeMap, future::Future};

use futures::StreamExt;
use rmcp::{
    RoleClient,
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use sse_stream::SseStream;
use tokio::sync::mpsc;

/// Messages buffered from the SSE stream before rmcp reads them.
const INBOUND_BUFFER: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("sse upstream request failed: {0}")]
    Http(#[from] reqwest::Error),
    #[error("sse upstream answered a POST with status {0}")]
    Status(reqwest::StatusCode),
    #[error("sse upstream: {0}")]
    Protocol(String),
}

pub struct SseTransport {
    http: reqwest::Client,
    post_url: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    inbound: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl SseTransport {
    /// Opens the event stream and waits for the `endpoint` event.
    pub async fn connect(
        http: reqwest::Client,
        url: &str,
        headers: &BTreeMap<String, String>,
    ) -> Result<Self, SseError> {
        let mut hm = reqwest::header::HeaderMap::new();
        for (k, v) in headers {
            let name = reqwest::header::HeaderName::try_from(k.as_str())
                .map_err(|e| SseError::Protocol(format!("header `{k}`: {e}")))?;
            let value = reqwest::header::HeaderValue::try_from(v.as_str())
                .map_err(|e| SseError::Protocol(format!("header `{k}`: {e}")))?;
            hm.insert(name, value);
        }
        let base =
            reqwest::Url::parse(url).map_err(|e| SseError::Protocol(format!("bad url: {e}")))?;
        let resp = http
            .get(base.clone())
            .headers(hm.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await?
            .error_for_status()?;
        let mut events = SseStream::from_bytes_stream(resp.bytes_stream());
        let post_url = loop {
            match events.next().await {
                Some(Ok(ev)) if ev.event.as_deref() == Some("endpoint") => {
                    let data = ev.data.unwrap_or_default();
                    break base
                        .join(data.trim())
                        .map_err(|e| SseError::Protocol(format!("bad endpoint `{data}`: {e}")))?;
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(SseError::Protocol(format!("event stream: {e}"))),
                None => {
                    return Err(SseError::Protocol(
                        "event stream ended before `endpoint`".into(),
                    ));
                }
            }
        };
        let (tx, inbound) = mpsc::channel(INBOUND_BUFFER);
        let reader = tokio::spawn(async move {
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { break };
                if ev.event.as_deref().is_some_and(|e| e != "message") {
                    continue;
                }
                let Some(data) = ev.data else { continue };
                match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&data) {
                    Ok(msg) => {
                        if tx.send(msg).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => tracing::warn!("sse upstream sent an unreadable message: {e}"),
                }
            }
        });
        Ok(Self {
            http,
            post_url,
            headers: hm,
            inbound,
            reader,
        })
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let req = self
            .http
            .post(self.post_url.clone())
            .headers(self.headers.clone())
            .json(&item);
        async move {
            let resp = req.send().await?;
            if resp.status().is_success() {
                Ok(())
            } else {
                Err(SseError::Status(resp.status()))
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        self.inbound.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        Ok(())
    }
}
