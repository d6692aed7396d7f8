//! The one error answer of fedgate's HTTP endpoints beside `/mcp` (the admin API, the console,
//! the connect and account pages, the metadata routes): a status and a JSON body
//! `{"error": "…"}`, with further keys where they help the caller on (the endpoints there are,
//! the diagnostics of a refused config). `/mcp` answers JSON-RPC errors instead (`wire_error`).

use http::{Response, StatusCode};
use serde_json::{Map, Value};

use super::{http::Body, responses::json};

#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    body: Map<String, Value>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        let mut body = Map::new();
        body.insert("error".into(), Value::String(message.into()));
        ApiError { status, body }
    }

    pub(super) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(super) fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// 404 for a path no endpoint serves, listing the ones there are.
    pub(super) fn unknown_endpoint(message: &str, endpoints: &[&str]) -> Self {
        Self::not_found(message).with("endpoints", endpoints.to_vec())
    }

    /// A further key of the body.
    pub(super) fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.body.insert(key.to_owned(), value.into());
        self
    }

    pub(super) fn response(self) -> Response<Body> {
        json(self.status, &Value::Object(self.body))
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn an_api_error_is_its_status_and_a_json_body_naming_the_error() {
        let r = ApiError::not_found("no upstream `x`")
            .with("upstreams", vec!["a", "b"])
            .response();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(r.headers()["content-type"], "application/json");
        let body = r.into_body().collect().await.map(|b| b.to_bytes());
        let v: Value = serde_json::from_slice(&body.unwrap_or_default()).unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!({"error": "no upstream `x`", "upstreams": ["a", "b"]})
        );
    }
}
