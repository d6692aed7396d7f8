//! Federation across gateways (F13), in one place: a peer gateway is an upstream of kind
//! `peer = true` (config) whose tools are imported under its name ([`import`]); this gateway
//! shows a peer only the flows it exports ([`export`]); every request between gateways
//! carries the path of gateway ids it passed and a claim naming the original caller
//! ([`hops`]), and what a call passes on to an upstream is decided in [`outbound`]. The
//! pipeline's hop guard (`pipeline::hop`) enforces the path at the edge.

pub mod export;
pub mod hops;
pub mod import;
pub mod outbound;

pub use hops::{DEFAULT_MAX_HOPS, HopRefusal};
