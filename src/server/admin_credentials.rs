//! `GET /admin/credentials`: who connected which per-user upstream, when, when it was last
//! refreshed and used, its expiry and scopes (never a token);
//! `DELETE /admin/credentials/<person>` revokes all of a person's credentials,
//! `DELETE /admin/credentials/<person>/<upstream>` one of them — each at its authorization
//! server too where it has a revocation endpoint (`upstreams[].at_provider` says how that went).

use crate::server::api_error::ApiError;
use http::{Method, StatusCode};
use serde_json::json;

use super::{http::Body, parts::AdminParts, responses::json};

pub(super) async fn route(
    admin: &AdminParts,
    method: &Method,
    parts: &[&str],
) -> Option<http::Response<Body>> {
    let Some(creds) = &admin.credentials else {
        return Some(match *method {
            Method::GET => json(StatusCode::OK, &json!({"connections": []})),
            _ => ApiError::not_found("no credential is per user").response(),
        });
    };
    let down = |e: crate::credentials::CredentialError| {
        tracing::warn!("per-user credentials: {e}");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the credential store does not answer",
        )
        .response()
    };
    Some(match (method, parts) {
        (&Method::GET, ["admin", "credentials"]) => match creds.list().await {
            Ok(list) => json(StatusCode::OK, &json!({"connections": list})),
            Err(e) => down(e),
        },
        (&Method::DELETE, ["admin", "credentials", owner, rest @ ..]) if rest.len() <= 1 => {
            let upstream = rest.first().copied();
            match creds.revoke(owner, upstream, Some("admin")).await {
                Ok(forgot) => json(
                    StatusCode::OK,
                    &json!({"owner": owner, "revoked": forgot.len(), "upstreams": forgot}),
                ),
                Err(e) => down(e),
            }
        }
        _ => return None,
    })
}
