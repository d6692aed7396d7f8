//! Sealing at rest: every stored credential and every connect `state` is AES-256-GCM under a
//! key from `[gateway] credential_key`, bound (associated data) to what it belongs to, so a
//! sealed value copied to another person's row does not open. Retired keys
//! (`credential_keys_retired`) still open what they sealed; values are sealed again with the
//! current key the next time they are written.

use ring::{
    aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey},
    rand::{SecureRandom, SystemRandom},
};
use sha2::{Digest, Sha256};

use crate::secret::Secret;

/// Bytes of the key id that starts a sealed value (which key sealed it).
const ID_LEN: usize = 4;

struct Key {
    id: [u8; ID_LEN],
    key: LessSafeKey,
}

impl Key {
    /// Any secret of at least 32 bytes: the AEAD key is its SHA-256 under a fixed label.
    fn derive(secret: &Secret) -> Result<Self, SealError> {
        if secret.expose().len() < 32 {
            return Err(SealError::ShortKey);
        }
        let raw: [u8; 32] = Sha256::new()
            .chain_update(b"fedgate credential key v1\0")
            .chain_update(secret.expose().as_bytes())
            .finalize()
            .into();
        let digest = Sha256::digest(raw);
        let mut id = [0u8; ID_LEN];
        id.copy_from_slice(&digest[..ID_LEN]);
        let key = UnboundKey::new(&AES_256_GCM, &raw).map_err(|_| SealError::UnusableKey)?;
        Ok(Self {
            id,
            key: LessSafeKey::new(key),
        })
    }
}

/// The current key and the retired ones.
pub struct Sealer {
    current: Key,
    retired: Vec<Key>,
    rng: SystemRandom,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sealer({} retired keys)", self.retired.len())
    }
}

/// Why sealing (or making a key or a nonce) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("a credential key needs at least 32 bytes")]
    ShortKey,
    #[error("the credential key could not be used")]
    UnusableKey,
    #[error("no randomness")]
    NoRandomness,
    #[error("sealing failed")]
    Failed,
    #[error("the value could not be encoded: {0}")]
    Encode(String),
}

/// A sealed value could not be opened: tampered, bound to something else, or sealed with a
/// key this gateway does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a sealed value did not open")]
pub struct Unopenable;

impl Sealer {
    pub fn new(current: &Secret, retired: &[Secret]) -> Result<Self, SealError> {
        Ok(Self {
            current: Key::derive(current)?,
            retired: retired.iter().map(Key::derive).collect::<Result<_, _>>()?,
            rng: SystemRandom::new(),
        })
    }

    /// `id ‖ nonce ‖ ciphertext+tag`, bound to `bound_to`.
    pub fn seal(&self, plain: &[u8], bound_to: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| SealError::NoRandomness)?;
        let mut body = plain.to_vec();
        self.current
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(bound_to),
                &mut body,
            )
            .map_err(|_| SealError::Failed)?;
        let mut out = Vec::with_capacity(ID_LEN + NONCE_LEN + body.len());
        out.extend_from_slice(&self.current.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// The plain value, if `sealed` was sealed by one of our keys for `bound_to`.
    pub fn open(&self, sealed: &[u8], bound_to: &[u8]) -> Result<Vec<u8>, Unopenable> {
        if sealed.len() < ID_LEN + NONCE_LEN {
            return Err(Unopenable);
        }
        let (id, rest) = sealed.split_at(ID_LEN);
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let key = std::iter::once(&self.current)
            .chain(&self.retired)
            .find(|k| k.id == id)
            .ok_or(Unopenable)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Unopenable)?;
        let mut body = body.to_vec();
        let plain = key
            .key
            .open_in_place(nonce, Aad::from(bound_to), &mut body)
            .map_err(|_| Unopenable)?;
        Ok(plain.to_vec())
    }

    /// Whether `sealed` was sealed with a retired key (to be sealed again).
    pub fn is_stale(&self, sealed: &[u8]) -> bool {
        sealed.get(..ID_LEN) != Some(&self.current.id[..])
    }

    /// Random bytes (connect states, elicitation ids).
    pub fn random<const N: usize>(&self) -> Result<[u8; N], SealError> {
        let mut b = [0u8; N];
        self.rng.fill(&mut b).map_err(|_| SealError::NoRandomness)?;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Secret {
        Secret::new(s.repeat(32))
    }

    #[test]
    fn a_sealed_value_opens_only_for_what_it_is_bound_to() {
        let s = Sealer::new(&key("a"), &[]).unwrap();
        let sealed = s.seal(b"tok", b"alice\0github").unwrap();
        assert_eq!(s.open(&sealed, b"alice\0github").unwrap(), b"tok");
        assert_eq!(s.open(&sealed, b"bob\0github"), Err(Unopenable));
        let mut bent = sealed.clone();
        let last = bent.len() - 1;
        bent[last] ^= 1;
        assert_eq!(s.open(&bent, b"alice\0github"), Err(Unopenable));
        assert_eq!(s.open(&sealed[..10], b"alice\0github"), Err(Unopenable));
    }

    #[test]
    fn retired_keys_open_and_mark_values_stale() {
        let old = Sealer::new(&key("o"), &[]).unwrap();
        let sealed = old.seal(b"tok", b"x").unwrap();
        let new = Sealer::new(&key("n"), &[key("o")]).unwrap();
        assert_eq!(new.open(&sealed, b"x").unwrap(), b"tok");
        assert!(new.is_stale(&sealed));
        assert!(!new.is_stale(&new.seal(b"tok", b"x").unwrap()));
        let without = Sealer::new(&key("n"), &[]).unwrap();
        assert_eq!(without.open(&sealed, b"x"), Err(Unopenable));
        assert!(Sealer::new(&Secret::new("short".into()), &[]).is_err());
    }
}
