//! What a launcher (Open MPI's `mpirun`, Slurm's `srun`, MPICH's Hydra, torchrun) tells each
//! process it starts through the environment: how many processes there are (the world size)
//! and this process's place among those on its own machine (the local rank). One owner for
//! the variables' names: `train::distributed` reads the world size, `backend` the local rank
//! (one GPU per process).

/// The variables in which launchers announce the number of processes they started: Open
/// MPI's `mpirun`, MPICH's Hydra (and Slurm's PMI-2), Slurm's `srun`.
pub const WORLD_SIZE: [&str; 3] = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"];

/// The variables in which launchers give a process its local rank: Open MPI's `mpirun`,
/// Slurm's `srun`, MPICH's Hydra, torchrun.
pub const LOCAL_RANK: [&str; 4] = [
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
    "LOCAL_RANK",
];

/// The world size a launcher announced (`var` reads a variable): the first of
/// [`WORLD_SIZE`] that holds a number; `None` outside a launcher.
pub fn world_size(var: impl Fn(&str) -> Option<String>) -> Option<usize> {
    first_number(&WORLD_SIZE, var)
}

/// This process's local rank as a launcher announced it (`var` reads a variable): the first
/// of [`LOCAL_RANK`] that holds a number; `None` outside a launcher.
pub fn local_rank(var: impl Fn(&str) -> Option<String>) -> Option<usize> {
    first_number(&LOCAL_RANK, var)
}

/// The value of the first of `names` that holds a number (spaces around it allowed).
fn first_number(names: &[&str], var: impl Fn(&str) -> Option<String>) -> Option<usize> {
    names.iter().find_map(|name| var(name)?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader of the environment made of `pairs` alone.
    fn env(pairs: &'static [(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_world_size_comes_from_the_first_variable_that_holds_a_number() {
        assert_eq!(world_size(env(&[])), None);
        assert_eq!(world_size(env(&[("OMPI_COMM_WORLD_SIZE", "4")])), Some(4));
        assert_eq!(
            world_size(env(&[("SLURM_STEP_NUM_TASKS", "8"), ("PMI_SIZE", "x")])),
            Some(8)
        );
        assert_eq!(world_size(env(&[("PMI_SIZE", " 2\n")])), Some(2));
    }

    #[test]
    fn the_local_rank_comes_from_the_first_variable_that_holds_a_number() {
        assert_eq!(local_rank(env(&[])), None);
        assert_eq!(local_rank(env(&[("SLURM_LOCALID", "3")])), Some(3));
        const BOTH: &[(&str, &str)] = &[("OMPI_COMM_WORLD_LOCAL_RANK", "1"), ("LOCAL_RANK", "5")];
        assert_eq!(local_rank(env(BOTH)), Some(1));
        const FIRST_NOT_A_NUMBER: &[(&str, &str)] =
            &[("OMPI_COMM_WORLD_LOCAL_RANK", "x"), ("LOCAL_RANK", "5")];
        assert_eq!(local_rank(env(FIRST_NOT_A_NUMBER)), Some(5));
        // A world size is not a local rank.
        assert_eq!(local_rank(env(&[("OMPI_COMM_WORLD_SIZE", "4")])), None);
    }
}
