//! The size of a value as JSON text, counted without building the text.

use std::io;

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
