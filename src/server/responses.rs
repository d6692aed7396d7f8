//! Plain HTTP answers of the edge: JSON bodies and 401 challenges.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, Full};

use super::http::Body;
use crate::policy::identity::{AuthError, ResourceMetadata};

/// 401 whose challenge points at the RFC 9728 metadata when OAuth is configured.
pub(super) fn challenge(e: &AuthError, metadata: Option<&ResourceMetadata>) -> Response<Body> {
    let mut resp = unauthorized(e);
    if let Some(m) = metadata
        && let Some(v) = resp
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
        && let Ok(v) =
            header::HeaderValue::from_str(&format!("{v}, resource_metadata=\"{}\"", m.url()))
    {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

/// 401 with the RFC 6750 challenge; the description never contains the credential.
pub(super) fn unauthorized(e: &AuthError) -> Response<Body> {
    let mut resp = json(
        StatusCode::UNAUTHORIZED,
        &serde_json::json!({"error": e.to_string()}),
    );
    let challenge = match e {
        AuthError::Missing => r#"Bearer realm="fedgate""#.to_owned(),
        other => format!(
            r#"Bearer realm="fedgate", error="invalid_token", error_description="{}""#,
            other.to_string().replace('"', "'")
        ),
    };
    if let Ok(v) = header::HeaderValue::from_str(&challenge) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

pub(super) fn json(status: StatusCode, v: &serde_json::Value) -> Response<Body> {
    json_body(status, serde_json::to_vec(v).unwrap_or_default())
}

/// An `application/json` answer of these bytes.
pub(super) fn json_body(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}
