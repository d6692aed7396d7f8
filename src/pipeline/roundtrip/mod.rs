//! The eras' ways of asking the caller for input, across one upstream call: the request in
//! flight (`pending`), calls parked for a stateless-era caller's answers (`parked`), and the
//! loop that drives one call through both (`exchange`).

pub mod exchange;
pub mod parked;
pub mod pending;
