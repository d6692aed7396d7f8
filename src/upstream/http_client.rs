//! The one HTTP client of http and peer upstreams (rmcp's Streamable HTTP transport runs on
//! it): every POST carries the W3C `traceparent`/`tracestate` of the request's `_meta`, so
//! HTTP middleware (proxies, ingress, the upstream's own HTTP instrumentation) joins the same
//! trace as the MCP hop; and with a configured credential every request carries it, refreshed
//! once when the upstream answers 401. The downstream client's own `Authorization` never
//! reaches it: fedgate builds every upstream request itself.

use std::{collections::HashMap, sync::Arc};

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::{
    model::ClientJsonRpcMessage,
    transport::streamable_http_client::{
        SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
        StreamableHttpResponseLimits,
    },
};
use sse_stream::Sse;

use crate::{
    policy::token::{Credential, Placement},
    secret::Secret,
    telemetry::traces,
};

type Headers = HashMap<HeaderName, HeaderValue>;
type Failed = StreamableHttpError<reqwest::Error>;

/// A credential and where it goes.
#[derive(Debug, Clone)]
pub struct Injection {
    pub credential: Arc<Credential>,
    pub placement: Placement,
}

/// An upstream's HTTP client: pooled reqwest (see `connect::http_client`), traces, and the
/// credential when there is one.
#[derive(Debug, Clone)]
pub struct UpstreamHttpClient {
    pub inner: reqwest::Client,
    pub injection: Option<Injection>,
}

impl UpstreamHttpClient {
    /// The request's headers with the credential in its place (and the token used, to
    /// invalidate it on a 401).
    async fn headers(
        &self,
        auth: Option<String>,
        mut custom: Headers,
    ) -> Result<(Option<String>, Headers, Option<Secret>), Failed> {
        let Some(inj) = &self.injection else {
            return Ok((auth, custom, None));
        };
        let token = inj.credential.token().await.map_err(|e| {
            StreamableHttpError::UnexpectedServerResponse(
                format!("upstream credential unavailable: {e}").into(),
            )
        })?;
        match &inj.placement {
            Placement::Bearer => Ok((Some(token.expose().to_owned()), custom, Some(token))),
            Placement::Header(name) => {
                let value = HeaderValue::from_str(token.expose()).map_err(|_| {
                    StreamableHttpError::UnexpectedServerResponse(
                        "credential is not a valid header value".into(),
                    )
                })?;
                custom.insert(name.clone(), value);
                Ok((auth, custom, Some(token)))
            }
        }
    }

    /// Sends with the credential; on 401 refreshes it once and sends again.
    async fn with_credential<T, F, Fut>(
        &self,
        auth_header: Option<String>,
        custom_headers: Headers,
        send: F,
    ) -> Result<T, Failed>
    where
        F: Fn(Option<String>, Headers) -> Fut,
        Fut: std::future::Future<Output = Result<T, Failed>>,
    {
        let (auth, headers, used) = self
            .headers(auth_header.clone(), custom_headers.clone())
            .await?;
        let first = send(auth, headers).await;
        let (Some(inj), Some(used)) = (&self.injection, used) else {
            return first;
        };
        if !unauthorized(&first) {
            return first;
        }
        // One refresh per 401: the cached token may have been revoked or rotated.
        inj.credential.invalidate(&used);
        let (auth, headers, _) = self.headers(auth_header, custom_headers).await?;
        send(auth, headers).await
    }
}

fn unauthorized<T>(r: &Result<T, Failed>) -> bool {
    match r {
        Err(StreamableHttpError::AuthRequired(_)) => true,
        // rmcp's wording of a 401 without a challenge: `HTTP 401 Unauthorized: <body>`.
        Err(StreamableHttpError::UnexpectedServerResponse(m)) => m.starts_with("HTTP 401"),
        _ => false,
    }
}

impl StreamableHttpClient for UpstreamHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    /// The transport's response limits reach the inner client (the default method would
    /// drop all but the SSE one).
    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: Headers,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        traces::headers_for(&message, &mut custom_headers);
        self.with_credential(auth_header, custom_headers, |auth, headers| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                auth,
                headers,
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<(), Failed> {
        let (auth, headers, _) = self.headers(auth_header, custom_headers).await?;
        self.inner
            .delete_session(uri, session_id, auth, headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failed> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failed> {
        let (auth, headers, _) = self.headers(auth_header, custom_headers).await?;
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth,
                headers,
                max_sse_event_size,
            )
            .await
    }
}
