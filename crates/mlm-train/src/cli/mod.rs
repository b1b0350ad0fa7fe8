//! The command line: its arguments ([`args`]), what each command does ([`commands`],
//! [`train`]), and the backend benchmark ([`mod@bench`]).

pub mod args;
pub mod bench;
pub mod commands;
pub mod train;

#[cfg(test)]
mod readme_commands;

pub use commands::main;
