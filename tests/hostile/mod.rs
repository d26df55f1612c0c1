//! The binary run as an attacker or an unlucky operator would run it: each test reproduces one
//! way an org-wide index can do harm (a secret indexed, a credential leaked, a generation
//! corrupted, a message stuck, a server driven by a web page) and asserts it no longer does.

mod credentials;
mod poison;
mod secrets;
mod server;
mod store;
