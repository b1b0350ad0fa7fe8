//! The command line: its arguments ([`args`]), what each command does ([`commands`],
//! [`train`]), the minimal-pair suite a command scores ([`pairs`]), and what every command
//! prints at its end ([`output`]).

pub mod args;
pub mod commands;
pub mod output;
pub mod pairs;
pub mod train;

#[cfg(test)]
mod readme_commands;

pub use commands::main;
