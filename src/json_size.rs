//! The size of a value as JSON text, counted without building the text; and the body of an
//! HTTP answer read only up to a bound.

use std::io;

/// Why a bounded body was not read whole.
#[derive(Debug)]
pub enum Unread {
    /// The connection broke off (reqwest's error).
    Broken(reqwest::Error),
    /// It is longer than the bound.
    TooLong,
}

/// The body of `resp`, at most `max` bytes (a longer one is refused, not cut).
pub async fn read_bounded(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, Unread> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(Unread::Broken)? {
        if body.len() + chunk.len() > max {
            return Err(Unread::TooLong);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Bytes `value` takes as compact JSON (`usize::MAX` if it cannot be serialized).
pub fn encoded_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    match serde_json::to_writer(&mut n, value) {
        Ok(()) => n.0,
        Err(_) => usize::MAX,
    }
}
