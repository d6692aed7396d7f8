//! The eras' ways of asking the caller for input, across one upstream call: the request in
//! flight (`pending`) and calls parked for a stateless-era caller's answers (`parked`).

pub mod parked;
pub mod pending;
