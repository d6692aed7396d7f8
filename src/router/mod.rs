//! Names and lists: namespacing (F2), the merged catalog and its routes (F3), cursors.

pub mod catalog;
pub mod cursor;
mod screening;
