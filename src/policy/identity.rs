//! Authentication (F5): API keys (SHA-256 hashes compared in constant time) and JWT bearer
//! tokens (HS256 secret, or RS256/ES256 keys from a JWKS file) → an [`Identity`] with roles.

use std::sync::Arc;

use http::{HeaderMap, header};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, jwk::JwkSet};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::authz::Access;

/// Who is calling, and what their roles allow.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub kind: IdentityKind,
    pub access: Arc<Access>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentityKind {
    ApiKey,
    Jwt,
    /// A verified mTLS client certificate.
    ClientCert,
    Anonymous,
    /// The operator on this machine (`fedgate stdio`, `fedgate call`).
    Local,
}

impl IdentityKind {
    const ALL: [IdentityKind; 5] = [
        IdentityKind::ApiKey,
        IdentityKind::Jwt,
        IdentityKind::ClientCert,
        IdentityKind::Anonymous,
        IdentityKind::Local,
    ];

    /// The kind [`IdentityKind::as_str`] names.
    pub fn named(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The kind [`IdentityKind::as_str`] names (`local` for anything else).
    pub fn from_str_or_local(s: &str) -> Self {
        Self::named(s).unwrap_or(IdentityKind::Local)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            IdentityKind::ApiKey => "api_key",
            IdentityKind::Jwt => "jwt",
            IdentityKind::ClientCert => "client_cert",
            IdentityKind::Anonymous => "anonymous",
            IdentityKind::Local => "local",
        }
    }
}

impl Identity {
    /// The same caller coming through a view (`/mcp/<name>`, `fedgate stdio --view`).
    pub fn through(mut self, scope: Arc<crate::policy::view::Scope>) -> Self {
        self.access = Arc::new((*self.access).clone().through(scope));
        self
    }

    /// `kind:name`: the one key of a person wherever state belongs to them (credentials,
    /// sealed session and task ids, plans, rate limits, connect links); two kinds that share a
    /// name are two people.
    pub fn key(&self) -> String {
        format!("{}:{}", self.kind.as_str(), self.name)
    }

    /// Full access, for the local operator and for gateways configured without `[auth]`.
    pub fn unrestricted(name: &str, kind: IdentityKind) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            access: Arc::new(Access::unrestricted()),
        }
    }
}

/// Whether a stored owner is an identity key (`kind:name`), not a bare name of before.
pub fn has_kind(owner: &str) -> bool {
    owner
        .split_once(':')
        .is_some_and(|(kind, _)| IdentityKind::named(kind).is_some())
}

impl Authenticator {
    /// The one kind of identity a bare name can be, if only one can have it: a configured API
    /// key or client-certificate name (not both) while no JWT may claim any name.
    pub fn sole_kind(&self, name: &str) -> Option<IdentityKind> {
        if self.jwt.is_some() {
            return None;
        }
        let key = self.api_keys.iter().any(|k| k.name == name);
        let cert = self.client_certs.iter().any(|(s, _)| s == name);
        match (key, cert) {
            (true, false) => Some(IdentityKind::ApiKey),
            (false, true) => Some(IdentityKind::ClientCert),
            _ => None,
        }
    }
}

/// Why a request was not authenticated. Messages never contain the credential.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthError {
    #[error("authentication required: send `Authorization: Bearer <token or API key>`")]
    Missing,
    #[error("unknown API key or invalid token")]
    Invalid,
    #[error("token rejected: {0}")]
    Token(String),
}

/// One configured API key.
#[derive(Debug, Clone)]
pub struct ApiKey {
    pub name: String,
    pub sha256: [u8; 32],
    pub roles: Vec<String>,
}

/// JWT validation settings.
#[derive(Clone)]
pub struct JwtConfig {
    pub keys: Vec<(Option<String>, Algorithm, DecodingKey)>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub roles_claim: String,
    /// The claim naming the person (`sub` unless configured).
    pub subject_claim: String,
    /// How such a person shows a connect page it is them: signing in at the issuer.
    pub sign_in: Option<Arc<SignIn>>,
}

/// `[auth.jwt.sign_in]`, checked: the identity provider is `[auth.jwt] issuer`, whose ID
/// tokens must name the person with the same claim its access tokens do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignIn {
    pub issuer: String,
    /// A literal, or an `env:`/`file:` reference, resolved when used.
    pub client_id: String,
    /// An `env:`/`file:` reference; `None` for a public client.
    pub client_secret: Option<String>,
    /// `openid` first, then the configured ones.
    pub scopes: Vec<String>,
    pub subject_claim: String,
}

impl std::fmt::Debug for JwtConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtConfig")
            .field("keys", &self.keys.len())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

/// Turns request headers into an identity.
#[derive(Debug, Clone)]
pub struct Authenticator {
    /// `None` = no `[auth]` section: everyone is an unrestricted anonymous caller.
    pub anonymous: Option<Arc<Access>>,
    pub api_keys: Vec<ApiKey>,
    pub jwt: Option<JwtConfig>,
    pub roles: Arc<super::authz::Roles>,
    pub open: bool,
    /// RFC 9728 protected-resource metadata, when OAuth is configured.
    pub resource_metadata: Option<ResourceMetadata>,
    /// Client-certificate subject (CN or DNS SAN) -> (identity name, roles' access).
    pub client_certs: Vec<(String, Arc<Access>)>,
}

/// What `/.well-known/oauth-protected-resource` serves.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ResourceMetadata {
    pub resource: String,
    pub authorization_servers: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes_supported: Vec<String>,
    pub bearer_methods_supported: Vec<String>,
}

impl ResourceMetadata {
    /// Where the metadata lives: the resource's origin + well-known path + the resource's path.
    pub fn url(&self) -> String {
        match self.resource.parse::<http::Uri>() {
            Ok(u) => format!(
                "{}://{}/.well-known/oauth-protected-resource{}",
                u.scheme_str().unwrap_or("https"),
                u.authority().map(|a| a.as_str()).unwrap_or(""),
                u.path().trim_end_matches('/')
            ),
            Err(_) => "/.well-known/oauth-protected-resource".into(),
        }
    }
}

impl Authenticator {
    /// A gateway without `[auth]`: every caller gets full access.
    pub fn open() -> Self {
        Self {
            anonymous: Some(Arc::new(Access::unrestricted())),
            api_keys: Vec::new(),
            jwt: None,
            roles: Arc::default(),
            open: true,
            resource_metadata: None,
            client_certs: Vec::new(),
        }
    }

    /// Every identity the config names (anonymous when allowed, API keys, client certificates),
    /// as a call of theirs would be authorized: for the console's tool runner.
    pub fn configured(&self) -> Vec<Identity> {
        let mut out = Vec::new();
        if let Some(access) = &self.anonymous {
            out.push(Identity {
                name: "anonymous".into(),
                kind: IdentityKind::Anonymous,
                access: access.clone(),
            });
        }
        for k in &self.api_keys {
            out.push(Identity {
                name: k.name.clone(),
                kind: IdentityKind::ApiKey,
                access: Arc::new(self.roles.access(&k.roles)),
            });
        }
        for (subject, access) in &self.client_certs {
            out.push(Identity {
                name: subject.clone(),
                kind: IdentityKind::ClientCert,
                access: access.clone(),
            });
        }
        out
    }

    /// The identity of a verified client certificate, if one of its names is configured.
    pub fn certificate_identity(&self, names: &[String]) -> Option<Identity> {
        self.client_certs
            .iter()
            .find(|(subject, _)| names.iter().any(|n| n == subject))
            .map(|(subject, access)| Identity {
                name: subject.clone(),
                kind: IdentityKind::ClientCert,
                access: access.clone(),
            })
    }

    /// `id` as the config of now authorizes it: the access its roles grant today (a JWT keeps
    /// the roles its token named), through the view it came through, or `None` when the config
    /// no longer has it (its key or certificate removed, anonymous callers no longer allowed).
    /// For a call that waited and runs later: it runs with what its caller may do then.
    pub fn current(&self, id: &Identity) -> Option<Identity> {
        let old = &id.access;
        let access = match id.kind {
            _ if self.open => return Some(id.clone()),
            IdentityKind::Local => return Some(id.clone()),
            IdentityKind::Anonymous => (**self.anonymous.as_ref()?).clone(),
            IdentityKind::ApiKey => {
                let key = self.api_keys.iter().find(|k| k.name == id.name)?;
                self.roles.access(&key.roles)
            }
            IdentityKind::ClientCert => {
                let (_, access) = self.client_certs.iter().find(|(s, _)| *s == id.name)?;
                (**access).clone()
            }
            IdentityKind::Jwt => self.roles.access(old.roles()),
        };
        let access = if old.is_peer() && !access.is_peer() {
            access.as_peer()
        } else {
            access
        };
        let access = match old.scope() {
            Some(scope) => access.through(scope.clone()),
            None => access,
        };
        Some(Identity {
            name: id.name.clone(),
            kind: id.kind,
            access: Arc::new(access),
        })
    }

    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Identity, AuthError> {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        let Some(token) = token else {
            return match &self.anonymous {
                Some(access) => Ok(Identity {
                    name: "anonymous".into(),
                    kind: IdentityKind::Anonymous,
                    access: access.clone(),
                }),
                None => Err(AuthError::Missing),
            };
        };
        if let Some(id) = self.api_key(token) {
            return Ok(id);
        }
        match &self.jwt {
            Some(jwt) if token.split('.').count() == 3 => self.jwt(jwt, token),
            _ if self.open => Ok(Identity::unrestricted("anonymous", IdentityKind::Anonymous)),
            _ => Err(AuthError::Invalid),
        }
    }

    fn api_key(&self, token: &str) -> Option<Identity> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Every configured key is compared, so timing does not reveal which one matched.
        let mut found = None;
        for key in &self.api_keys {
            if bool::from(key.sha256.ct_eq(&digest)) {
                found = Some(key);
            }
        }
        found.map(|k| Identity {
            name: k.name.clone(),
            kind: IdentityKind::ApiKey,
            access: Arc::new(self.roles.access(&k.roles)),
        })
    }

    fn jwt(&self, jwt: &JwtConfig, token: &str) -> Result<Identity, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Invalid)?;
        let candidates = jwt.keys.iter().filter(|(kid, alg, _)| {
            *alg == header.alg && (header.kid.is_none() || kid.is_none() || *kid == header.kid)
        });
        let mut last = AuthError::Invalid;
        for (_, alg, key) in candidates {
            let mut v = Validation::new(*alg);
            v.validate_nbf = true;
            v.leeway = 0;
            match &jwt.audience {
                Some(aud) => v.set_audience(&[aud]),
                None => v.validate_aud = false,
            }
            if let Some(iss) = &jwt.issuer {
                v.set_issuer(&[iss]);
            }
            match jsonwebtoken::decode::<serde_json::Value>(token, key, &v) {
                Ok(data) => {
                    let claims = data.claims;
                    let name = subject(&claims, &jwt.subject_claim)?;
                    let roles: Vec<String> = match claims.get(&jwt.roles_claim) {
                        Some(serde_json::Value::Array(a)) => a
                            .iter()
                            .filter_map(|r| r.as_str().map(str::to_owned))
                            .collect(),
                        Some(serde_json::Value::String(s)) => {
                            s.split_whitespace().map(str::to_owned).collect()
                        }
                        _ => Vec::new(),
                    };
                    return Ok(Identity {
                        name,
                        kind: IdentityKind::Jwt,
                        access: Arc::new(self.roles.access(&roles)),
                    });
                }
                Err(e) => last = AuthError::Token(jwt_reason(&e)),
            }
        }
        Err(last)
    }
}

/// Longest subject a token may name (state keyed by it stays bounded).
const MAX_SUBJECT_BYTES: usize = 256;

/// The person a verified token names: a non-empty string of at most 256 bytes without control
/// characters. Without one there is no one to keep credentials, sessions and plans for.
pub fn subject(claims: &serde_json::Value, claim: &str) -> Result<String, AuthError> {
    let refused = |why: &str| AuthError::Token(format!("claim `{claim}` {why}"));
    match claims.get(claim) {
        None | Some(serde_json::Value::Null) => Err(refused("is missing: it names the person")),
        Some(serde_json::Value::String(s)) if s.is_empty() => Err(refused("is empty")),
        Some(serde_json::Value::String(s)) if s.len() > MAX_SUBJECT_BYTES => {
            Err(refused("is longer than 256 bytes"))
        }
        Some(serde_json::Value::String(s)) if s.chars().any(char::is_control) => {
            Err(refused("holds control characters"))
        }
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(refused("is not a string")),
    }
}

pub fn jwt_reason(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => "expired".into(),
        ErrorKind::ImmatureSignature => "not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => "wrong audience".into(),
        ErrorKind::InvalidIssuer => "wrong issuer".into(),
        ErrorKind::InvalidSignature => "bad signature".into(),
        ErrorKind::MissingRequiredClaim(c) => format!("missing claim `{c}`"),
        _ => "invalid token".into(),
    }
}

/// Reads RS256/ES256 keys from a JWKS file.
/// Why a JWKS file gave no keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    #[error("cannot read JWKS `{0}`: {1}")]
    Read(String, String),
    #[error("JWKS `{0}`: {1}")]
    Invalid(String, String),
    #[error("JWKS `{0}`: algorithm {1} is not supported (RS256, ES256)")]
    Algorithm(String, String),
    #[error("JWKS `{0}`: a key without `alg` must be RSA or EC")]
    KeyType(String),
}

pub fn load_jwks(path: &str) -> Result<Vec<(Option<String>, Algorithm, DecodingKey)>, JwksError> {
    let invalid = |e: &dyn std::fmt::Display| JwksError::Invalid(path.to_owned(), e.to_string());
    let text = std::fs::read_to_string(path)
        .map_err(|e| JwksError::Read(path.to_owned(), e.to_string()))?;
    let set: JwkSet = serde_json::from_str(&text).map_err(|e| invalid(&e))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let alg = match jwk.common.key_algorithm.map(|a| a.to_string()) {
            Some(a) if a == "RS256" => Algorithm::RS256,
            Some(a) if a == "ES256" => Algorithm::ES256,
            Some(a) => {
                return Err(JwksError::Algorithm(path.to_owned(), a));
            }
            None => match &jwk.algorithm {
                jsonwebtoken::jwk::AlgorithmParameters::RSA(_) => Algorithm::RS256,
                jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                _ => {
                    return Err(JwksError::KeyType(path.to_owned()));
                }
            },
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| invalid(&e))?;
        keys.push((jwk.common.key_id.clone(), alg, key));
    }
    Ok(keys)
}

/// The names a certificate speaks for: subject common names and DNS subject alternative names.
pub fn certificate_names(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                names.push((*d).to_owned());
            }
        }
    }
    names
}
