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
    model::{ClientJsonRpcMessage, GetExtensions, ServerJsonRpcMessage},
    transport::streamable_http_client::{
        SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
        StreamableHttpResponseLimits,
    },
};
use sse_stream::Sse;

use crate::{
    credentials::PersonToken,
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
    /// A person's own connection: their token on every request (discovery, lists, the GET
    /// stream too), swapped in place when it is refreshed.
    pub person: Option<Arc<arc_swap::ArcSwap<Secret>>>,
    /// What the upstream last refused: a request without a credential (it wants one on every
    /// request), or on a person's connection their credential or its scope.
    pub refused: Arc<parking_lot::Mutex<Option<Refused>>>,
}

/// Why an upstream refused a connection's credential (or its absence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// 401.
    Unauthorized,
    /// 403 `insufficient_scope`, with the scopes it asked for.
    Scope(String),
}

impl UpstreamHttpClient {
    /// The request's headers with the credential in its place (and the token used, to
    /// invalidate it on a 401). A per-user credential is `person`'s token, on that person's
    /// requests only; shared requests (initialize, lists) go without one.
    async fn headers(
        &self,
        auth: Option<String>,
        mut custom: Headers,
        person: Option<&PersonToken>,
    ) -> Result<(Option<String>, Headers, Option<Secret>), Failed> {
        let Some(inj) = &self.injection else {
            return Ok((auth, custom, None));
        };
        let token = if inj.credential.per_user().is_some() {
            match (person, &self.person) {
                (Some(p), _) => p.0.clone(),
                (None, Some(own)) => (**own.load()).clone(),
                (None, None) => return Ok((auth, custom, None)),
            }
        } else {
            inj.credential.token().await.map_err(|e| {
                StreamableHttpError::UnexpectedServerResponse(
                    format!("upstream credential unavailable: {e}").into(),
                )
            })?
        };
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

    /// Sends with the credential; on 401 refreshes it once and sends again. A person's token
    /// is not refreshed here: their request is answered with [`PERSON_REJECTED`], so the
    /// pipeline drops the token and asks the person again (the shared connection stays up).
    async fn with_credential<F, Fut>(
        &self,
        auth_header: Option<String>,
        custom_headers: Headers,
        message: &ClientJsonRpcMessage,
        send: F,
    ) -> Result<StreamableHttpPostResponse, Failed>
    where
        F: Fn(Option<String>, Headers) -> Fut,
        Fut: std::future::Future<Output = Result<StreamableHttpPostResponse, Failed>>,
    {
        let person = person_of(message);
        let (auth, headers, used) = self
            .headers(auth_header.clone(), custom_headers.clone(), person)
            .await?;
        let first = send(auth, headers).await;
        let personal = person.is_some() || self.person.is_some();
        if unauthorized(&first) && (used.is_none() || personal) {
            *self.refused.lock() = Some(Refused::Unauthorized);
        }
        let (Some(inj), Some(used)) = (&self.injection, used) else {
            return first;
        };
        if let (true, ClientJsonRpcMessage::Request(r), Some(scope)) =
            (personal, message, insufficient_scope(&first))
        {
            *self.refused.lock() = Some(Refused::Scope(scope.clone()));
            return Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::error(
                    rmcp::ErrorData::new(
                        rmcp::model::ErrorCode(PERSON_NEEDS_SCOPE),
                        "the caller's own credential lacks a scope the upstream asks for",
                        Some(serde_json::json!({"scope": scope})),
                    ),
                    Some(r.id.clone()),
                ),
                None,
            ));
        }
        if !unauthorized(&first) {
            return first;
        }
        if personal {
            return match message {
                ClientJsonRpcMessage::Request(r) => Ok(StreamableHttpPostResponse::Json(
                    ServerJsonRpcMessage::error(
                        rmcp::ErrorData::new(
                            rmcp::model::ErrorCode(PERSON_REJECTED),
                            "the upstream refused the caller's own credential",
                            None,
                        ),
                        Some(r.id.clone()),
                    ),
                    None,
                )),
                _ => first,
            };
        }
        // One refresh per 401: the cached token may have been revoked or rotated.
        inj.credential.invalidate(&used);
        let (auth, headers, _) = self.headers(auth_header, custom_headers, None).await?;
        send(auth, headers).await
    }
}

/// The JSON-RPC error code a person's request gets when the upstream answered it 401: the
/// credential step (`pipeline::connect`) drops that person's token and asks again.
pub const PERSON_REJECTED: i32 = -32_091;

/// The JSON-RPC error code a person's request gets when the upstream answered it 403
/// `insufficient_scope`: `data.scope` is what it asked for (the credential step asks the
/// person to sign in again with it).
pub const PERSON_NEEDS_SCOPE: i32 = -32_092;

/// The scopes a 403 `insufficient_scope` challenge asks for (RFC 6750 3.1): bounded, printable,
/// at most 16 of them. `Some("")` when the challenge names none.
fn insufficient_scope<T>(r: &Result<T, Failed>) -> Option<String> {
    let Err(StreamableHttpError::InsufficientScope(e)) = r else {
        return None;
    };
    if !e.www_authenticate_header.contains("insufficient_scope") {
        return None;
    }
    let scopes: Vec<&str> = e
        .required_scope
        .as_deref()
        .unwrap_or_default()
        .split(' ')
        .filter(|s| {
            !s.is_empty()
                && s.len() <= 128
                && s.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        })
        .take(16)
        .collect();
    Some(scopes.join(" "))
}

/// The person whose token a request carries (the credential step put it there).
fn person_of(message: &ClientJsonRpcMessage) -> Option<&PersonToken> {
    match message {
        ClientJsonRpcMessage::Request(r) => r.request.extensions().get::<PersonToken>(),
        _ => None,
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
        self.with_credential(auth_header, custom_headers, &message, |auth, headers| {
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
        let (auth, headers, _) = self.headers(auth_header, custom_headers, None).await?;
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
        let (auth, headers, _) = self.headers(auth_header, custom_headers, None).await?;
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
