//! The command line: its arguments ([`args`]), what each command does ([`commands`],
//! [`train`]), and the backend benchmark ([`mod@bench`]).

pub mod args;
pub mod bench;
pub mod commands;
pub mod train;

pub use commands::main;
